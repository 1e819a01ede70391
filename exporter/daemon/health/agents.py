"""Agent checks, mirroring alerts/rules/agents.py, and the report's "agents" section:
each tapped engine's agents, their requests in flight, context and stalls.

Mirrored without Prometheus: the hog, a runaway answer, a context near its limit and
the working set over the pool. Two parts of the rules need a counter's history the
exporter does not keep per agent, and are left to Prometheus: whether an agent was
active in the last hour (here every agent with a last prompt counts), and
RigAgentRecomputing.
"""

from __future__ import annotations

from exporter.daemon.health.document import AgentLine, Flight
from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.health.view import Context, RigView, engine_labels, percent, seconds, signal
from exporter.daemon.tap.tally import AgentReading


def agent_signals(c: Context) -> list[Signal]:
    out: list[Signal] = []
    t = c.t
    for config in c.engines:
        tap = c.view.taps.get(config.name)
        if tap is None:
            continue
        engine = engine_labels(config)
        name = config.name
        context = _context_length(c.view, name)
        for agent in tap.agents:
            labels = {**engine, "agent": agent.name}
            out.append(_hog(c, labels, agent, tap.agents))
            out += _runaway(c, labels, agent)
            if agent.last_prompt_tokens is not None:
                out.append(_context(c, labels, agent, context))
        prompts = [a.last_prompt_tokens for a in tap.agents if a.last_prompt_tokens]
        pool = _pool(c.view, name)
        if prompts and pool is not None:
            total = float(sum(prompts))
            out.append(signal(
                "agents_working_set", engine, "RigAgentsWorkingSetOverPool",
                (Stage("warning", t.agent_working_set_for_seconds),), total > pool, total, pool,
                "tokens", f"{name}: the agents' last prompts add up to {total:,.0f} tokens "
                f"against a KV pool of {pool:,.0f} (L1, + L2 with HiCache)", sustained=True))
    return out


def _hog(c: Context, labels: dict[str, str], agent: AgentReading,
         agents: tuple[AgentReading, ...]) -> Signal:
    t = c.t
    running = agent.longest_request_seconds
    waiting = [a for a in agents if a is not agent
               and a.longest_first_token_wait_seconds >= t.agent_hog_waiting_seconds]
    holds = running >= t.agent_hog_running_seconds and bool(waiting)
    reason = f"{labels['agent']}: oldest request in flight {seconds(running)}"
    if waiting:
        longest = max(waiting, key=lambda a: a.longest_first_token_wait_seconds)
        reason += (f"; {longest.name} waits {seconds(longest.longest_first_token_wait_seconds)}"
                   " for a first token")
    return signal("agent_hogging", labels, "RigAgentHoggingEngine", (Stage("warning", 0),),
                  holds, running, t.agent_hog_running_seconds, "s", reason)


def _runaway(c: Context, labels: dict[str, str], agent: AgentReading) -> list[Signal]:
    limit = c.t.agent_runaway_tokens
    stages = (Stage("warning", 0),)
    size, unbounded = agent.response_tokens_max, agent.unbounded_response_tokens_max
    return [
        signal("agent_runaway_output", labels, "RigAgentRunawayOutput", stages, size >= limit,
               size, limit, "tokens", f"{labels['agent']}: largest response in flight "
               f"{size:,} tokens", "size"),
        signal("agent_runaway_output", labels, "RigAgentRunawayOutput", stages,
               unbounded >= limit // 4 and size < limit, unbounded, limit // 4, "tokens",
               f"{labels['agent']}: largest response in flight without max_tokens "
               f"{unbounded:,} tokens", "unbounded"),
    ]


def _context(c: Context, labels: dict[str, str], agent: AgentReading,
             context: int | None) -> Signal:
    limit = c.t.agent_context_ratio
    stages = (Stage("warning", 0),)
    prompt = agent.last_prompt_tokens or 0
    if context is None:
        return signal("agent_context", labels, "RigAgentContextNearLimit", stages, None, None,
                      limit, "ratio", f"{labels['agent']}: last prompt {prompt:,} tokens; the "
                      "engine's context length is unknown (neither /server_info nor "
                      "/v1/models said it)")
    ratio = prompt / context
    return signal("agent_context", labels, "RigAgentContextNearLimit", stages, ratio >= limit,
                  ratio, limit, "ratio", f"{labels['agent']}: last prompt {prompt:,} tokens, "
                  f"{percent(ratio)} of the context length {context:,}")


def _context_length(view: RigView, name: str) -> int | None:
    engine = view.engines.get(name)
    info = engine.info if engine is not None else None
    return info.context_length_tokens if info is not None else None


def _pool(view: RigView, name: str) -> float | None:
    """L1, + L2 where HiCache has a host pool; None while the engine does not say."""
    engine = view.engines.get(name)
    if engine is None:
        return None
    values = engine.metrics.values
    l1 = values.get("kv_capacity_tokens")
    if not l1:
        return None
    return l1 + (values.get("hicache_host_capacity_tokens") or 0.0)


def agents_section(view: RigView) -> list[AgentLine]:
    """Per tapped engine and agent: what it has in flight, its context and its stalls
    (the /api/health "agents" list; rigctl health and the landing page show it)."""
    out = []
    for name, tap in sorted(view.taps.items()):
        context = _context_length(view, name)
        for agent in tap.agents:
            prompt = agent.last_prompt_tokens
            out.append(AgentLine(
                engine=name,
                agent=agent.name,
                streams=agent.streams_active,
                in_flight=[Flight(age_seconds=f.age_seconds, waiting=f.waiting,
                                  tokens=f.tokens, open_gap_seconds=f.open_gap_seconds,
                                  bounded=f.bounded) for f in agent.in_flight],
                longest_request_seconds=agent.longest_request_seconds,
                longest_first_token_wait_seconds=agent.longest_first_token_wait_seconds,
                last_prompt_tokens=prompt,
                context_ratio=None if prompt is None or not context else prompt / context,
                max_gap_seconds=agent.max_gap_seconds,
                starved_seconds={by: s for by, s in agent.starved_seconds.items() if s > 0},
                requests=sum(agent.requests.values()),
                unbounded_requests=agent.unbounded_requests,
            ))
    return out
