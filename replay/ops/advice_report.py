"""The advice as files: `advice.json`, two PNG plots beside it, and a self-contained HTML page that embeds them.

Pictures because the choice is a trade-off: events kept on time against how long every window waits.
"""
from __future__ import annotations

import base64
import html
import json
import os

import matplotlib

from replay.io import lake_fs
from replay.ops.diff import number

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

PLOTS = ("tradeoff.png", "lateness.png")


def check_folder(folder: str) -> None:
    """The report is local files: a folder on object storage (an s3a lake's advice folder) is refused in one line."""
    if lake_fs.is_uri(folder):
        raise ValueError(f"advice report: {folder} is on object storage; write the report to a local folder "
                         f"(--out DIR)")


def write(advice: dict, folder: str, with_html: bool = False) -> dict[str, str]:
    """Write the report into `folder`, a local one; returns the paths by name (json, the plots, and html when asked)."""
    check_folder(folder)
    os.makedirs(folder, exist_ok=True)
    paths = {"json": os.path.join(folder, "advice.json")}
    with open(paths["json"], "w") as f:
        json.dump(advice, f, indent=2, sort_keys=True)
        f.write("\n")
    paths["tradeoff.png"] = _tradeoff(advice, os.path.join(folder, "tradeoff.png"))
    paths["lateness.png"] = _histogram(advice, os.path.join(folder, "lateness.png"))
    if with_html:
        paths["html"] = os.path.join(folder, "advice.html")
        with open(paths["html"], "w") as f:
            f.write(page(advice, {name: paths[name] for name in PLOTS}))
    return paths


def _tradeoff(advice: dict, path: str) -> str:
    """Events kept on time against the median output delay, one point per candidate tolerance."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for key, label, marker in (("late_sweep", "late_arrival_tolerance", "o"),
                               ("out_of_order_sweep", "out_of_order_tolerance", "s")):
        sweep = advice[key]
        xs = [r["delay"]["p50"] or 0.0 for r in sweep]
        ys = [100 * (1 - r["share"]) for r in sweep]
        ax.plot(xs, ys, marker=marker, label=label)
        for r, x, y in zip(sweep, xs, ys):
            ax.annotate(r["tolerance"], (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.axhline(100 * advice["completeness"], color="grey", linestyle="--", linewidth=1,
               label=f"completeness {advice['completeness']}")
    ax.set_xlabel("median output delay (s of arrival time after the window ends)")
    ax.set_ylabel("events within the tolerance (%)")
    ax.set_title(f"job {advice['job']}: events kept on time vs output delay")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _histogram(advice: dict, path: str) -> str:
    bins = advice["profile"]["lateness_histogram"]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.bar(range(len(bins)), [b["events"] for b in bins], color="#4a7ab5")
    ax.set_xticks(range(len(bins)), [b["bin"] for b in bins], rotation=45, ha="right", fontsize=8)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylabel("events")
    ax.set_xlabel("lateness: arrival time - event time")
    ax.set_title(f"job {advice['job']}: lateness of {advice['events']} events")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def markdown(advice: dict) -> str:
    """The sweeps and the advice as Markdown (Dagster metadata, the HTML page)."""
    lines = [f"**{advice['verdict']}**", "", f"Output delays: windows a live run would emit (clock rows: "
             f"{advice['live_clock']['clock_rows']}); windows still open when the range ends are not measured.", ""]
    for key, name, reason in (("late_sweep", "late_arrival_tolerance", "late"),
                              ("out_of_order_sweep", "out_of_order_tolerance", "out of order")):
        lines += [f"| {name} | events {reason} | share | adjusted | dropped | delay p50 (s) | delay p99 (s) "
                  f"| windows measured | not measured | meets | within budget |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for r in advice[key]:
            d = r["delay"]
            lines.append(f"| {r['tolerance']} | {r['touched']} | {r['share']:.4%} | {r['adjusted']} | {r['dropped']} "
                         f"| {number(d['p50'])} | {number(d['p99'])} | {d['windows']} | {d['unmeasured']} "
                         f"| {'yes' if r['meets'] else 'no'} | {_budget(r)} |")
        lines.append("")
    return "\n".join(lines)


def _budget(r: dict) -> str:
    return {None: "-", True: "yes", False: "no"}[r.get("within_budget")]


def page(advice: dict, plots: dict[str, str]) -> str:
    """A self-contained HTML page: the advice, the snippet, the plots (inline), the profile and the sweeps."""
    def img(path: str) -> str:
        with open(path, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        return f'<img alt="{html.escape(os.path.basename(path))}" src="data:image/png;base64,{data}">'

    def table(rows: list[list], head: list[str]) -> str:
        cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><tr>{cells}</tr>{body}</table>"

    sweeps = ""
    for key, name in (("late_sweep", "late_arrival_tolerance"), ("out_of_order_sweep", "out_of_order_tolerance")):
        sweeps += f"<h3>{name}</h3>" + table(
            [[r["tolerance"], r["touched"], f"{r['share']:.4%}", r["adjusted"], r["dropped"], number(r["delay"]["p50"]),
              number(r["delay"]["p99"]), r["delay"]["windows"], r["delay"]["unmeasured"],
              "yes" if r["meets"] else "no", _budget(r)] for r in advice[key]],
            [name, "events touched", "share", "adjusted", "dropped", "delay p50 (s)", "delay p99 (s)",
             "windows measured", "not measured", "meets", "within budget"])
    prof = advice["profile"]
    quantiles = ["p50", "p90", "p99", "p99.9", "max"]
    profile_rows = [[scope, measure, s[measure]["positive"], *[number(s[measure][q]) for q in quantiles]]
                    for scope, s in [("all", prof["overall"]),
                                     *sorted(prof["partitions"].items(), key=lambda kv: int(kv[0]))]
                    for measure in ("lateness", "out_of_order", "early", "silence")]
    p = advice["predicted"]
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Retrace advice: {html.escape(advice['job'])}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}pre{{background:#f4f4f4;padding:1em}}
img{{max-width:48%;margin-right:1%}}</style></head><body>
<h1>Tolerance advice for job {html.escape(advice['job'])}</h1>
<p><strong>{html.escape(advice['verdict'])}</strong></p>
<p>{advice['events']} events, arrivals from {html.escape(str(advice['from'] or 'the start'))} to
{html.escape(str(advice['to'] or 'the end'))}; completeness target {advice['completeness']}.</p>
<h2>Recommended policy</h2><pre>{html.escape(advice['snippet'])}</pre>
<p>A replay with it adjusts {p['adjusted']} and drops {p['dropped']} of {p['events']} events
({p['adjusted_share']:.4%} adjusted); windows are emitted {number(p['delay']['p50'])} s (median) after they end,
as a live run would emit them (clock rows: {html.escape(advice['live_clock']['clock_rows'])});
{p['delay']['unmeasured']} windows still open when the range ends are not measured.</p>
{''.join(f'<p>{html.escape(n)}</p>' for n in advice['notes'])}
<h2>Trade-off and lateness</h2>{img(plots['tradeoff.png'])}{img(plots['lateness.png'])}
<h2>Candidates (each a replay by the engine)</h2>{sweeps}
<h2>Profile (seconds)</h2>{table(profile_rows, ['partition', 'measure', 'events > 0', *quantiles])}
</body></html>
"""

