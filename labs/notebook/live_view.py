"""What a live run looks like in a notebook: its output line by line (with the rank that wrote it), its step
records read from a log.jsonl as the run appends them, its memory, and the widgets that show all that.

labs.notebook.dashboard gives this view a source: a command it launches (Run) or a job it follows (Watch).
Here is what they share: `LiveView` collects and draws; a monitor thread polls the sources and redraws.
Without IPython no widget is made and nothing is drawn unless asked (`render()`), so plain python and the
tests use the same object.
"""
from __future__ import annotations

import html
import io
import json
import math
import re
import sys
import threading
import time
from pathlib import Path
from typing import Callable

MiB = 2**20
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")  # torchrun's --tee prefix
_RANK_TAG = re.compile(r"^\[rank=(\d+)\]\s?")                  # labs.common.dist.log(..., all_ranks=True)
MEMORY_FIELDS = {"model_state_bytes": "model state", "device_peak_allocated_bytes": "GPU peak allocated",
                 "device_reserved_bytes": "GPU reserved"}
PHASES = ("data", "forward", "backward", "comm", "optimizer", "other")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def in_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown)."""
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip else None
    return shell is not None and hasattr(shell, "kernel")


def split_rank(line: str) -> tuple[int | None, str]:
    """'[rank1]: text' -> (1, 'text'); a line no rank is named in -> (None, line)."""
    m = _RANK_PREFIX.match(line)
    rank, text = (int(m[1]), line[m.end():]) if m else (None, line)
    t = _RANK_TAG.match(text)
    if t and (rank is None or int(t[1]) == rank):
        rank, text = int(t[1]), text[t.end():]
    return rank, text


class LiveView:
    """What a launched run and a watched job share: lines (with their rank), step records read from a
    log.jsonl as it grows (or parsed from lines), sampled memory per rank, the widgets and their plots."""

    def __init__(self, title: str, log=None, parse: Callable[[str], dict | None] | None = None,
                 show: bool | None = None, poll_s: float = 0.5, refresh_s: float = 1.0, plot_s: float = 2.0,
                 max_lines: int = 20000):
        self.title, self.log, self.parse = title, Path(log) if log else None, parse
        self.poll_s, self.refresh_s, self.plot_s, self.max_lines = poll_s, refresh_s, plot_s, max_lines
        self.lines: list[tuple[int | None, str]] = []
        self._records: dict[tuple, dict] = {}
        self._offset, self._partial = 0, b""
        self.rss: dict[str, tuple[list[float], list[float]]] = {}  # label -> (seconds, MiB)
        self.status, self.t0, self.t_end = "starting", time.monotonic(), None
        self.stop_requested = False
        self._lock, self._draw_lock, self._draw_s = threading.Lock(), threading.Lock(), 0.0
        self._version, self._shown, self._drawn = 0, -1, -1  # bumped by each new line/record/sample; shown, drawn
        self._finished = threading.Event()
        self.widget = self._make_widgets() if (in_kernel() if show is None else show) else None

    # -- data ------------------------------------------------------------------------------------------
    def _add_line(self, raw: str) -> None:
        rank, text = split_rank(raw.rstrip("\r\n"))
        try:
            rec = self.parse(text) if self.parse else None
        except Exception:  # noqa: BLE001  a parser that chokes on a line just skips it
            rec = None
        with self._lock:
            self.lines.append((rank, text))
            del self.lines[:-self.max_lines]
            if rec and "step" in rec:
                self._records[(rec.get("rank", rank or 0), rec["step"])] = rec
            self._version += 1

    def _poll_log(self) -> None:
        """Read what was appended to log.jsonl since the last poll (whole lines only)."""
        if self.log is None:
            return
        try:
            size = self.log.stat().st_size
            if size < self._offset:  # truncated or replaced: start over
                self._offset, self._partial, self._records = 0, b"", {}
            if size == self._offset:
                return
            with open(self.log, "rb") as f:
                f.seek(self._offset)
                chunk = f.read(size - self._offset)
        except OSError:
            return
        self._offset += len(chunk)
        *whole, self._partial = (self._partial + chunk).split(b"\n")
        with self._lock:
            for line in whole:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                self._records[(r.get("rank", 0), r.get("step"))] = r  # the last record per step, as read_log
            self._version += 1

    def _sample(self) -> None:
        """Per-rank resident memory of the processes (a launched run only)."""

    def records(self) -> list[dict]:
        with self._lock:
            return sorted(self._records.values(), key=lambda r: (r.get("step") or 0, r.get("rank", 0)))

    def output(self, rank: int | None | str = "all") -> list[str]:
        """The lines so far: all of them (each with its [rankN] prefix) or one rank's (None: the launcher's)."""
        with self._lock:
            lines = list(self.lines)
        if rank == "all":
            return [text if r is None else f"[rank{r}] {text}" for r, text in lines]
        return [text for r, text in lines if r == rank]

    def series(self) -> dict[str, dict[str, tuple[list, list]]]:
        """The plot data: panel -> curve -> (x, y). Loss and throughput from the lowest rank that logs."""
        recs = self.records()
        ranks = sorted({r.get("rank", 0) for r in recs})
        main = [r for r in recs if r.get("rank", 0) == ranks[0] and r.get("step") is not None] if ranks else []

        def curve(rows, key, scale=1.0):
            pts = [(r["step"], r[key] / scale) for r in rows if _number(r.get(key))]  # step 1's tokens/s is nan
            return [p[0] for p in pts], [p[1] for p in pts]

        out = {"loss": {"loss": curve(main, "loss")}}
        if any("tokens_per_s" in r for r in main):
            out["tokens/s"] = {"tokens/s": curve(main, "tokens_per_s")}
        else:
            out["step time (ms)"] = {"step": curve(main, "step_s", 1e-3)}

        def memory(fields):
            mem = {}
            for key, name in fields.items():
                for rank in ranks:
                    xs, ys = curve([r for r in recs if r.get("rank", 0) == rank], key, MiB)
                    if xs:
                        mem[name if len(ranks) == 1 else f"{name} r{rank}"] = (xs, ys)
            return mem

        out["memory (MiB)"] = memory(MEMORY_FIELDS)
        with self._lock:
            rss = {k: (list(t), list(m)) for k, (t, m) in self.rss.items()}
        if rss:  # sampled from the processes themselves (a launched run)
            out["RSS per rank (MiB), sampled"] = rss
        else:  # a watched job: only what it logged. (Beside model state, ~300 MB of torch would flatten it.)
            out["peak RSS (MiB)"] = memory({"peak_rss_bytes": "peak RSS"})
        return {panel: {k: v for k, v in curves.items() if v[0]} for panel, curves in out.items()}

    def summary(self) -> str:
        """'step 150 | loss 2.3100 | 12,345 tokens/s | model state 1.6 MiB | data 1.2 forward 8.0 ... ms'."""
        recs = [r for r in self.records() if r.get("step") is not None]
        if not recs:
            return ""
        last = max(recs, key=lambda r: (r["step"], -r.get("rank", 0)))
        parts = [f"step {last['step']}"]
        if _number(last.get("loss")):
            parts.append(f"loss {last['loss']:.4f}")
        if _number(last.get("tokens_per_s")):
            parts.append(f"{last['tokens_per_s']:,.0f} tokens/s")
        if _number(last.get("model_state_bytes")):
            parts.append(f"model state {last['model_state_bytes'] / MiB:.2f} MiB")
        ph = [f"{p} {1e3 * last[f'{p}_s']:.1f}" for p in PHASES if _number(last.get(f"{p}_s"))]
        if ph:
            parts.append(" ".join(ph) + " ms")
        return " | ".join(parts)

    # -- drawing ---------------------------------------------------------------------------------------
    def render(self) -> bytes:
        """The plots as a PNG (matplotlib's Agg canvas: no pyplot, so safe from a thread and headless).
        The figure is kept between drawings and only its lines' data change (a third cheaper than a new
        figure); it is rebuilt when a panel or a curve appears."""
        panels = [(name, curves) for name, curves in self.series().items() if curves]
        layout = tuple((name, tuple(curves)) for name, curves in panels)
        with self._draw_lock:
            if layout != getattr(self, "_layout", None):
                self._fig, self._lines, self._layout = self._new_figure(panels), {}, layout
                for ax, (name, curves) in zip(self._fig.axes, panels):
                    for label, (x, y) in curves.items():
                        self._lines[name, label] = ax.plot(x, y, lw=1.5, label=label)[0]
                    if len(curves) > 1 or name.startswith(("memory", "RSS")):
                        ax.legend(fontsize=7, loc="lower right")  # a fixed place: "best" costs a search per draw
            else:
                for name, curves in panels:
                    for label, (x, y) in curves.items():
                        self._lines[name, label].set_data(x, y)
                for ax in self._fig.axes:
                    ax.relim()
                    ax.autoscale_view()
            buf = io.BytesIO()
            self._fig.savefig(buf, format="png")
        return buf.getvalue()

    def _new_figure(self, panels):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(3.4 * max(1, len(panels)), 2.6), dpi=80)
        FigureCanvasAgg(fig)
        if not panels:
            fig.text(0.5, 0.5, f"{self.title}: waiting for the first step...", ha="center", va="center")
        for i, (name, _) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("seconds" if name.startswith("RSS") else "step", fontsize=9)
            ax.tick_params(labelsize=8)
        fig.subplots_adjust(left=0.28 / len(panels) if panels else 0.1, right=0.99, bottom=0.18, top=0.88,
                            wspace=0.3)  # not tight_layout: it doubles the cost of a drawing
        return fig

    def _make_widgets(self):
        import ipywidgets as W
        from IPython.display import display

        self._w_status = W.HTML()
        self._w_stop = W.Button(description="Stop", button_style="danger", icon="stop",
                                tooltip="end every rank: SIGTERM, then SIGKILL after a grace period")
        self._w_view = W.Dropdown(options=["all ranks"], value="all ranks", description="output",
                                  layout=W.Layout(width="200px"))
        self._w_plot, self._w_out = W.Image(format="png", layout=W.Layout(display="none")), W.HTML()
        self._w_stop.on_click(lambda _: threading.Thread(target=self.stop, daemon=True).start())
        self._w_view.observe(lambda _: self._show_output(), names="value")
        box = W.VBox([W.HBox([self._w_stop, self._w_view, self._w_status]), self._w_plot, self._w_out])
        for w, name in ((box, "course-dashboard"), (self._w_plot, "course-dashboard-plot"),
                        (self._w_stop, "course-dashboard-stop"), (self._w_out, "course-dashboard-output")):
            w.add_class(name)
        display(box)
        return box

    def _show_output(self, n: int = 12) -> None:
        v = self._w_view.value
        lines = self.output("all" if v == "all ranks" else None if v == "launcher" else int(v.split()[1]))
        self._w_out.value = ("<pre style='font-size:11px;line-height:1.25;margin:0;white-space:pre-wrap'>"
                             + html.escape("\n".join(lines[-n:])) + "</pre>")

    def _refresh(self, plot: bool = True) -> None:
        """Bring the widgets up to date (from the monitor thread; a no-op without widgets); plot: redraw
        the picture too, if anything changed since it was drawn."""
        if self.widget is None:
            return
        with self._lock:
            version = self._version
            ranks = sorted({r for r, _ in self.lines if r is not None})
            launcher = any(r is None for r, _ in self.lines)
        secs = (self.t_end or time.monotonic()) - self.t0
        colour = {"running": "#1f77b4", "finished": "green"}.get(self.status.split()[0], "#c0392b")
        self._w_status.value = (f"<b>{html.escape(self.title)}</b> <span style='color:{colour}'>"
                                f"{html.escape(self.status)}</span> {secs:.0f} s<br>"
                                f"<span style='font-size:11px'>{html.escape(self.summary())}</span>")
        views = ["all ranks", *(f"rank {r}" for r in ranks), *(["launcher"] if launcher and ranks else [])]
        if list(self._w_view.options) != views:
            self._w_view.options = views  # the current choice stays when it is still offered
        self._w_stop.disabled = self.t_end is not None or self.stop_requested
        if version != self._shown:
            self._show_output()
            self._shown = version
        if plot and version != self._drawn:
            self._w_plot.value = self.render()
            self._w_plot.layout.display = None  # hidden until there is a picture (no broken-image icon)
            self._drawn = version

    # -- life cycle ------------------------------------------------------------------------------------
    def _source_done(self) -> bool:
        raise NotImplementedError

    def _poll_source(self) -> None:
        """Read new output (a watched job's text log; a launched run has a reader thread)."""

    def _end(self) -> None:
        """After the source is done: make sure nothing is left (a launched run)."""

    def _sleep(self) -> None:
        """Between polls (a launched run wakes up as soon as it exits)."""
        time.sleep(self.poll_s)

    def _monitor(self) -> None:
        last = last_plot = 0.0
        try:
            while True:
                done = self._source_done()  # first: the last poll below then sees everything written
                self._poll_source()
                self._poll_log()
                if done:
                    break
                self._sample()
                now = time.monotonic()
                if now - last >= self.refresh_s:
                    # A drawing costs ~0.15 s of CPU that the ranks would use: at most 1/10 of a core.
                    plot = now - last_plot >= max(self.plot_s, 10 * self._draw_s)
                    self._safe_refresh(plot)
                    last = time.monotonic()
                    if plot:
                        last_plot, self._draw_s = last, last - now
                self._sleep()
            self._end()
        finally:
            self.t_end = self.t_end or time.monotonic()
            self._shown = -1  # the final status, the last picture: before wait() returns
            self._safe_refresh()
            self._finished.set()

    def _safe_refresh(self, plot: bool = True) -> None:
        """A drawing that fails (a closed comm as the kernel goes away, a bad record) must not end the
        monitoring: the run is still going, and wait() must still wait for it."""
        try:
            self._refresh(plot)
        except Exception as e:  # noqa: BLE001
            if not getattr(self, "_warned", False):
                self._warned = True
                print(f"{self.title}: the dashboard could not draw ({e!r}); the run goes on", file=sys.stderr)

    def _begin(self) -> "LiveView":
        self.status = "running"
        self._thread = threading.Thread(target=self._monitor, daemon=True, name=f"dashboard {self.title}")
        self._thread.start()
        return self

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def stop(self) -> None:
        raise NotImplementedError

    def _wait(self, timeout: float | None) -> None:
        """Block until the run ends; an interrupt or the timeout stops it first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._finished.wait(0.1):
                if deadline is not None and time.monotonic() > deadline:
                    self.stop()
                    self._finished.wait(30)
                    raise TimeoutError(f"{self.title}: still running after {timeout:.0f} s; stopped it")
        except KeyboardInterrupt:
            print(f"{self.title}: interrupted: stopping every process...", file=sys.stderr)
            self.stop()
            self._finished.wait(30)
            raise
