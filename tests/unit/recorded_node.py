"""ansible-playbook against a node that only answers from a recording: no module ever runs.

    python -m tests.unit.recorded_node ANSWERS.json [ansible-playbook arguments...]

Everything on the controller is Ansible's own: playbook and role loading, defaults, includes,
`when`, loops, templating with the project's filters, registers, check mode. Only the two calls
through which an action plugin reaches a node are replaced, for a node that cannot be reached
here (a RHEL host) or need not be booted (the lab's Debian node, for what preflight reads).
The one that runs a module (ActionBase._execute_module) answers

- the fact module (setup) with the recorded facts;
- a command or shell whose command line matches a recorded read (regex) with that read's
  rc and stdout;
- any other command with "skipped" in check mode (what the command module does there) and
  changed otherwise;
- every other module with the recording's `changed` and, as real modules do, the arguments it
  was called with under invocation.module_args, so a callback can show them.

The one that runs a command without a module (ActionBase._low_level_execute_command: raw,
script, reboot, a file transfer's temporary directory) fails the task: with `-c local` it would
run on this machine.
`run_playbook` starts such a run with this repository's ansible.cfg and the json callback.

It proves what Ansible would ask the node to do, with which arguments, in which order; never
what the node's dnf, rpm or kernel would answer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible.cli.playbook import PlaybookCLI
from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

REPO = Path(__file__).resolve().parents[2]

FACT_MODULES = {"ansible.legacy.setup", "ansible.builtin.setup", "setup"}
COMMAND_MODULES = {"ansible.legacy.command", "ansible.builtin.command", "command"}


class RecordedNode:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.facts: dict[str, Any] = answers["facts"]
        self.changed: bool = answers["changed"]
        self.reads: list[dict[str, Any]] = answers.get("reads", [])

    def _read(self, command_line: str) -> dict[str, Any] | None:
        for read in self.reads:
            if re.search(read["match"], command_line):
                stdout = read.get("stdout", "")
                return {"rc": read.get("rc", 0), "stdout": stdout, "stdout_lines": stdout.splitlines(), "stderr": ""}
        return None

    def answer(self, module: str, args: dict[str, Any], check_mode: bool) -> dict[str, Any]:
        if module in FACT_MODULES:
            return {"ansible_facts": {f"ansible_{key}": value for key, value in self.facts.items()}, "changed": False}
        invocation = {"invocation": {"module_args": args}}
        if module in COMMAND_MODULES:
            command_line = (
                args.get("cmd") or args.get("_raw_params") or " ".join(str(part) for part in args.get("argv", []))
            )
            read = self._read(command_line)
            if read is not None:
                return {**read, "changed": True, "cmd": command_line, **invocation}
            if check_mode:
                return {"skipped": True, "changed": False, "msg": "Command would have run if not in check mode"}
            return {"rc": 0, "stdout": "", "stdout_lines": [], "stderr": "", "changed": True, **invocation}
        return {"changed": self.changed, **invocation}


def main(argv: list[str]) -> None:
    node = RecordedNode(json.loads(Path(argv[0]).read_text()))

    def execute_module(
        self: ActionBase, module_name: str | None = None, module_args: dict[str, Any] | None = None, **_: Any
    ) -> dict[str, Any]:
        module = module_name or self._task.action
        args = dict(self._task.args if module_args is None else module_args)
        return node.answer(module, args, check_mode=bool(self._play_context.check_mode))

    def refuse_command(self: ActionBase, cmd: str, *_: Any, **__: Any) -> dict[str, Any]:
        raise AnsibleError(f"the recorded node runs no command: {self._task.action} asked for {cmd!r}")

    ActionBase._execute_module = execute_module  # type: ignore[method-assign]
    ActionBase._low_level_execute_command = refuse_command  # type: ignore[method-assign]
    PlaybookCLI.cli_executor(["ansible-playbook", *argv[1:]])


def run_playbook(
    answers: dict[str, Any], args: list[str], workdir: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`ansible-playbook ARGS` against the recording (answers.json and Ansible's temp under
    `workdir`): the repository's ansible.cfg on the linear strategy, facts gathered by the
    plays only and kept in memory, the json callback on stdout."""
    recording = workdir / "answers.json"
    recording.write_text(json.dumps(answers))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STRATEGY": "linear",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
    }
    command = [sys.executable, "-m", "tests.unit.recorded_node", str(recording), *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=timeout)


if __name__ == "__main__":
    main(sys.argv[1:])
