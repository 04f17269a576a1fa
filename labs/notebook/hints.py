"""The hint tiers behind a button: the notebook's face of `checker hint` (checker/hints.py keeps the tiers and
the learner's progress; this module only shows them).

    from checker.api import hint_tasks, open_hint
    from labs.notebook.hints import hint_panel
    hint_panel("lab2", hint_tasks, open_hint)

Nothing opens until the learner presses the button: a notebook run top to bottom (nbval, CI) opens no tier.
"""
from __future__ import annotations

import html


def hint_panel(lab: str, list_tasks, open_next):
    """A task picker, a "next hint" button and what has been opened. list_tasks(lab) -> [{"name", "contract",
    "tiers"...}] or raises (hints off, none written); open_next(lab, name) -> (task, tiers open)."""
    try:
        tasks = list_tasks(lab)
    except (OSError, LookupError, RuntimeError) as e:
        return _Text(f"no hints here: {e}")
    try:
        import ipywidgets as w
    except ImportError:
        return _Text(f"`.venv/bin/checker hint {lab} TASK` opens the next tier of a task; tasks: "
                     + ", ".join(t["name"] for t in tasks))
    pick = w.Dropdown(options=[(t["name"], t["name"]) for t in tasks], description="task",
                      layout=w.Layout(width="60%"))
    button = w.Button(description="next hint tier", tooltip="1: the concept, 2: the shape, 3: the recipe")
    shown = w.HTML()

    def contract(_=None):
        t = next(t for t in tasks if t["name"] == pick.value)
        shown.value = f"<b>must hold</b>: {html.escape(t['contract'])}"

    def more(_):
        try:
            task, tier = open_next(lab, pick.value)
        except (OSError, LookupError, RuntimeError) as e:
            shown.value = f"<i>{html.escape(str(e))}</i>"
            return
        rows = "".join(f"<li><b>hint {k}</b>: {html.escape(text)}</li>" for k, text in
                       enumerate(task["tiers"][:tier], 1))
        left = len(task["tiers"]) - tier
        shown.value = (f"<b>must hold</b>: {html.escape(task['contract'])}<ol style='list-style:none'>{rows}</ol>"
                       + (f"<i>{left} more tier(s)</i>" if left else "<i>that was the last tier</i>"))

    pick.observe(contract, names="value")
    button.on_click(more)
    contract()
    return w.VBox([w.HBox([pick, button]), shown])


class _Text:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.text)}</p>"
