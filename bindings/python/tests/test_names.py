"""A tool's default name, and so its keys, do not depend on how its module is loaded: run as a
script (``__main__``), with ``-m``, or imported, in real processes on one SQLite file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

QS = textwrap.dedent(
    '''
    import os
    import sys

    import toolonce

    store = toolonce.open_store(sys.argv[1] if __name__ == "__main__" else os.environ["QS_STORE"])

    @toolonce.write(store)
    def send_email(to: str) -> dict:
        with open(os.environ["QS_SENT"], "a") as f:
            f.write(to + "\\n")
        return {"sent_by": os.getpid()}

    def main():
        print(send_email.tool_name)
        print(send_email(to="ada@example.com", scope="run-42"))

    if __name__ == "__main__":
        main()
    '''
)


def run(args, cwd: Path, env_extra: dict) -> str:
    import os

    env = dict(os.environ, **env_extra)
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_a_script_run_as_main_and_imported_gets_one_name_and_runs_once(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "qs.py").write_text(QS)
    (pkg / "nested").mkdir()
    (pkg / "nested" / "__init__.py").write_text("")
    (pkg / "nested" / "tools.py").write_text(QS)
    url = f"sqlite://{tmp_path / 'toolonce.db'}"
    sent = tmp_path / "sent.log"
    env = {"QS_STORE": url, "QS_SENT": str(sent)}

    as_script = run(["qs.py", url], pkg, env).splitlines()
    imported = run(["-c", "import qs; qs.main()"], pkg, env).splitlines()
    as_module = run(["-m", "qs", url], pkg, env).splitlines()
    assert as_script[0] == imported[0] == as_module[0] == "qs.send_email"
    assert as_script[1] == imported[1] == as_module[1]  # replayed: the first run's result
    assert sent.read_text().splitlines() == ["ada@example.com"]

    # In a package: the script's name is the one `import nested.tools` gives.
    in_package = run(["nested/tools.py", url], pkg, env).splitlines()
    imported = run(["-c", "import nested.tools as t; t.main()"], pkg, env).splitlines()
    as_module = run(["-m", "nested.tools", url], pkg, env).splitlines()
    assert in_package[0] == imported[0] == as_module[0] == "nested.tools.send_email"


def test_a_default_name_that_cannot_be_made_stable_is_refused_naming_name(tmp_path):
    code = textwrap.dedent(
        f'''
        import toolonce
        store = toolonce.open_store("memory://")
        try:
            @toolonce.write(store)
            def send_email(to: str) -> None:
                pass
        except toolonce.ConfigError as e:
            print("refused:", e)
        @toolonce.write(store, name="send_email")
        def named(to: str) -> None:
            pass
        print("named:", named.tool_name)
        '''
    )
    out = run(["-c", code], tmp_path, {})
    assert "refused:" in out and "name=" in out, out
    assert "named: send_email" in out
