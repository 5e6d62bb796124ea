"""doit's console output for wino's build: one line per task that runs, nothing per task that
is up to date, and one summary line at the end, so a no-op ``doit compile:c`` prints one line.
A task whose ``meta`` says ``notice`` (a skipped target saying why, on stderr) is neither
listed nor counted: its message is the output."""

from __future__ import annotations

from doit.reporter import ExecutedOnlyReporter

NOTICE = {"wino": "notice"}  # the meta of a task that only prints a message


def _counted(task) -> bool:
    return bool(task.actions) and task.meta != NOTICE


class BuildReporter(ExecutedOnlyReporter):
    desc = "wino: a line per task that runs, one summary line, nothing per up-to-date task"

    def __init__(self, outstream, options):
        super().__init__(outstream, options)
        self.ran = 0
        self.fresh = 0

    def execute_task(self, task):
        if _counted(task):
            self.ran += 1
            super().execute_task(task)

    def skip_uptodate(self, task):
        self.fresh += _counted(task)

    def complete_run(self):
        super().complete_run()
        if not (self.failures or self.runtime_errors) and (self.ran or self.fresh):
            self.write(f"wino build: {self.ran} task(s) ran, {self.fresh} up to date\n")
