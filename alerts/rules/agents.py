"""Agent alerts, from the stream tap's per-agent families (docs/tap.md#agents): one agent
holding the engine while another waits, a runaway answer, a context near its limit,
the agents' working set over the KV pool, an agent whose prompts keep being
recomputed. Each names its agent; they are warnings, routed as the others are.
"""

from __future__ import annotations

from alerts.rules.common import AGE, Alert, dur, num, pct
from exporter.schema import ENGINE_SERIES
from exporter.thresholds import Thresholds

AGENT = f"{ENGINE_SERIES}, agent"
AGENT_SUBJECT = ("Agent {{ $labels.agent }} of engine {{ $labels.engine }}"
                 " ({{ $labels.kind }}) on {{ $labels.instance }}")


def _active(window: str) -> str:
    """The agents that sent a prompt within `window`: a last prompt of an agent gone
    for good is no part of the working set."""
    return f"increase(rig_agent_prompt_tokens_total[{window}]) > 0"


def agent_alerts(t: Thresholds) -> list[Alert]:
    running, waiting = dur(t.agent_hog_running_seconds), dur(t.agent_hog_waiting_seconds)
    runaway = t.agent_runaway_tokens
    unbounded = runaway // 4
    active = dur(t.agent_working_set_active_seconds)
    window = dur(t.agent_recompute_window_seconds)
    prompts = f"increase(rig_agent_prompt_tokens_total[{window}])"
    uncached = f"({prompts} - increase(rig_agent_cached_prompt_tokens_total[{window}]))"
    least_uncached = t.agent_recompute_requests * t.hicache_recompute_tokens
    # Another agent waiting: the engine's count of waiting agents less this one's own.
    waits = f"rig_agent_longest_first_token_wait_seconds >= {num(t.agent_hog_waiting_seconds)}"
    waiter = ('{{ with printf "topk(1, rig_agent_longest_first_token_wait_seconds{'
              'instance=%q,engine=%q,agent!=%q})" $labels.instance $labels.engine'
              ' $labels.agent | query }}{{ range . }} Agent {{ .Labels.agent }} has waited'
              ' {{ .Value | humanizeDuration }}.{{ end }}{{ end }}')
    return [
        Alert(
            "RigAgentHoggingEngine",
            "warning",
            f"""
rig_agent_longest_request_seconds >= {num(t.agent_hog_running_seconds)}
and on({AGENT})
(
  rig_agent_longest_request_seconds * 0
  + on({ENGINE_SERIES}) group_left()
  count by ({ENGINE_SERIES}) ({waits})
  - on({AGENT})
  (rig_agent_longest_first_token_wait_seconds >= bool {num(t.agent_hog_waiting_seconds)})
) > 0
""",
            0,
            f"One agent's request has run {running} or more while another agent has waited"
            f" {waiting} or more for its first token.",
            AGENT_SUBJECT + " has had a request running for {{ $value | humanizeDuration }}"
            f" (alert at {running}) while another agent waits {waiting} or more for a first"
            " token." + waiter,
            "The hog's response tokens and whether it set max_tokens: rigctl health, agents.",
            value_kind=AGE,
        ),
        Alert(
            "RigAgentRunawayOutput",
            "warning",
            f"rig_agent_response_tokens_max >= {runaway}",
            0,
            f"A response has generated {runaway} tokens or more.",
            AGENT_SUBJECT + " has a response of {{ $value }} generated tokens in flight"
            f" (alert at {runaway}).",
            "The agent's prompt: a skill or instruction that asks for everything at once;"
            " its max_tokens.",
            signal="size",
        ),
        Alert(
            "RigAgentRunawayOutput",
            "warning",
            f"""
rig_agent_unbounded_response_tokens_max >= {unbounded}
unless on({AGENT})
rig_agent_response_tokens_max >= {runaway}
""",
            0,
            f"A request without max_tokens has generated {unbounded} tokens or more.",
            AGENT_SUBJECT + " has a response of {{ $value }} generated tokens in flight from"
            f" a request without max_tokens (alert at {unbounded}, a quarter of {runaway}).",
            "Give the agent a max_tokens (max_completion_tokens, or max_new_tokens natively).",
            signal="unbounded",
        ),
        Alert(
            "RigAgentContextNearLimit",
            "warning",
            f"""
rig_agent_last_prompt_tokens
/ on({ENGINE_SERIES}) group_left()
(rig_engine_context_length_tokens > 0)
>= {num(t.agent_context_ratio)}
and on({AGENT})
{_active(active)}
""",
            0,
            f"An agent's last prompt filled {pct(t.agent_context_ratio)} or more of the"
            " engine's context length.",
            AGENT_SUBJECT + " last sent a prompt of {{ $value | humanizePercentage }} of the"
            f" engine's context length (alert at {pct(t.agent_context_ratio)}).",
            "Does the agent's compaction shrink its context, or only move it? Its"
            " rig_agent_last_prompt_tokens after each compaction.",
        ),
        Alert(
            "RigAgentsWorkingSetOverPool",
            "warning",
            # L1, or L1 + L2 where HiCache's host pool exists (its capacity gauge is
            # there only with HiCache on).
            f"""
sum without (agent) (
  rig_agent_last_prompt_tokens
  and
  {_active(active)}
)
> on({ENGINE_SERIES}) group_left()
(
  rig_engine_kv_capacity_tokens
  + on({ENGINE_SERIES}) group_left()
  (rig_engine_hicache_host_capacity_tokens > 0)
  or on({ENGINE_SERIES})
  rig_engine_kv_capacity_tokens
)
""",
            t.agent_working_set_for_seconds,
            "The agents' last prompts add up to more than the KV pool (L1, + L2 with"
            f" HiCache) for {dur(t.agent_working_set_for_seconds)}.",
            "Engine {{ $labels.engine }} ({{ $labels.kind }}) on {{ $labels.instance }}: the"
            " last prompts of the agents active in the last " + active + " add up to"
            " {{ $value | humanize }} tokens, more than its KV pool holds (L1, + L2 with"
            " HiCache): returning sessions are evicted and prefilled again.",
            "Fewer agents at once, earlier compaction, or a larger L2 (RUNBOOK arithmetic).",
        ),
        Alert(
            "RigAgentRecomputing",
            "warning",
            f"""
{uncached} / ({prompts} > 0) >= {num(t.agent_recompute_uncached_ratio)}
and
{uncached} >= {least_uncached}
and
sum without (outcome) (increase(rig_agent_requests_total[{window}]))
>= {t.agent_recompute_requests}
""",
            0,
            f"An agent's prompt tokens arrived {pct(t.agent_recompute_uncached_ratio)} or more"
            f" uncached over {window}, across {t.agent_recompute_requests} or more large"
            " requests.",
            AGENT_SUBJECT + " had {{ $value | humanizePercentage }} of its prompt tokens"
            f" prefilled again over the last {window} (alert at"
            f" {pct(t.agent_recompute_uncached_ratio)}, with {least_uncached} uncached"
            f" tokens or more in {t.agent_recompute_requests} requests or more): its"
            " session keeps being evicted.",
            "The working set against the pool (RigAgentsWorkingSetOverPool) and the"
            " HiCache tiers' hits.",
        ),
    ]


def starvation_names(t: Thresholds) -> str:
    """For RigDecodeStarvation's description: the agent that stalled most and the
    agent blamed, where a tap with agents knows them (nothing otherwise)."""
    window = dur(t.decode_starvation_for_seconds + t.decode_stall_window_seconds)
    return ('{{ with printf "topk(1, increase(rig_agent_starved_seconds_total{'
            f'instance=%q,engine=%q}}[{window}]) > 0)" $labels.instance $labels.engine'
            ' | query }}{{ range . }} Agent {{ .Labels.agent }} stalled, blamed on'
            ' {{ .Labels.by }} ({{ .Value | humanizeDuration }} in the window).{{ end }}'
            '{{ end }}')
