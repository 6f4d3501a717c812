"""The chaos soak's human report: the figures table, the takeover per fault kind and the fault
timeline. Pure formatting of the figures dict that `--json` prints; computes nothing."""

from __future__ import annotations

from typing import Any

from leasecron.bench._stats import show, table


def _pct(part: int, whole: int) -> str:
    return "n/a (none)" if whole == 0 else f"{100.0 * part / whole:.0f} %"


def render(figures: dict[str, Any]) -> str:
    never = int(figures["ticks_never_run"])
    alarmed = int(figures["never_run_alarmed_missed"]) + int(figures["never_run_recorded_failed"])
    owner = figures["single_owner"]
    rows = [
        ("seed", str(figures["seed"]), "printed; rerun with --seed"),
        ("ticks due (once-per-tick jobs)", show(figures["ticks_due"]), ""),
        ("runs (handler attempts at the ledger)", show(figures["runs"]), ""),
        (
            "ticks run more than once",
            f"{figures['ticks_run_more_than_once']} "
            f"({figures['of_those_refused_by_fence']} refused by the fence)",
            "",
        ),
        ("duplicate effects after fencing", show(figures["duplicate_effects"]), "0"),
        (
            "  in the store (PostgreSQL, leasecron.fencing)",
            show(figures.get("duplicate_effects_in_store")),
            "0",
        ),
        (
            "duplicate effects with fencing off",
            show(figures["duplicate_effects_without_fencing"]),
            "",
        ),
        ("ticks never run (no accepted effect)", show(never), ""),
        ("  alarmed: Missed JobRun", show(figures["never_run_alarmed_missed"]), ""),
        (
            "    of which written by the operator",
            show(figures["of_those_missed_by_operator"]),
            "(the rest: a replica's catch-up)",
        ),
        (
            "  recorded: run Abandoned/LostLock/Failed",
            show(figures["never_run_recorded_failed"]),
            "",
        ),
        ("  silent (no alarm, no record)", show(figures["never_run_silent"]), "0"),
        (
            "    of which: claimed, never run",
            show(figures["never_run_silent_claimed_unrun"]),
            "",
        ),
        ("  alarmed or recorded", _pct(alarmed, never), "100 %"),
        ("status.missedRuns (operator's count)", show(figures["missed_runs_status"]), ""),
        ("stale writes refused by the fence", show(figures["refused_writes"]), ""),
        (
            "single-owner terms / mails / stale refused",
            f"{owner['terms']} / {owner['mails_taken']} / {owner['stale_writes_refused']}",
            "",
        ),
        ("API writes per run (all replica writes)", show(figures["api_writes_per_run"]), ""),
        ("API writes by resource", show(figures["api_writes_by_resource"]), ""),
        ("every-replica runs", show(figures["every_replica_runs"]), ""),
        (
            "replica RSS at the end, max / mean",
            f"{figures['replica_rss_mb']['max']} / {figures['replica_rss_mb']['mean']} MB",
            "",
        ),
        ("replicas (started in all)", f"{figures['replicas']} ({figures['replicas_started']})", ""),
        (
            "operator restarts (it exits when it loses its Lease)",
            show(figures["operator_restarts"]),
            "",
        ),
    ]
    lines = [table(rows, title=f"leasecron bench chaos: {figures['minutes']:g} min")]
    lines.append("")
    lines.append("longest takeover per fault kind (s): once-per-tick / single-owner")
    for kind, entry in sorted(figures["takeover_s"].items()):
        lines.append(
            f"  {kind:<11} {show(entry['once_per_tick_s'])} / {show(entry['single_owner_s'])}"
        )
    lines.append("")
    lines.append("timeline (s from the window's start)")
    for fault in figures["timeline"]:
        extra = {
            k: v for k, v in fault.items() if k not in ("kind", "at_s", "duration_s", "target")
        }
        lines.append(
            f"  {fault['at_s']:>7.1f}  {fault['kind']:<11} {fault['target']:<14} "
            f"{fault['duration_s']:>5.1f}s  {extra if extra else ''}".rstrip()
        )
    for tick in figures["silent_ticks"]:
        lines.append(f"SILENT: {tick}")
    return "\n".join(lines)
