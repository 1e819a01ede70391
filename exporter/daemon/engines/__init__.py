"""The inference engines (SGLang, vLLM): their /metrics fetched (`fetch`), parsed
(`exposition`), mapped onto the rig_engine_* schema (`mapping`, `normalise`), their
identity (`info`), the stream probe (`probe`), their generation routes (`routes`),
the source that assembles a reading (`source`) and the stall tracker (`stall`)."""
