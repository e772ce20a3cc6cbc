"""A tool's default name, and so its keys, do not depend on how its module is loaded: run as a
script (``__main__``), with ``-m``, or imported, in real processes on one SQLite file."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import toolonce

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


# Callables whose default name would not be stable and unique. Module-level, as users write
# them: a lambda here is named `<lambda>` with no `<locals>` to set it apart.
send_a = lambda to: {"sent": "a", "to": to}  # noqa: E731
send_b = lambda to: {"sent": "b", "to": to}  # noqa: E731


def charge(account: str, cents: int) -> dict:
    return {"account": account, "cents": cents}


class Mailer:
    """A callable object, and a class whose instances' bound methods share one qualname."""

    def __init__(self, account: str) -> None:
        self.account = account

    def __call__(self, to: str) -> dict:
        return {"account": self.account, "to": to}

    def send(self, to: str) -> dict:
        return {"account": self.account, "to": to}


MODULE_STORE = toolonce.open_store("memory://")


class Billing:
    @staticmethod
    @toolonce.write(MODULE_STORE)
    def refund(order: str) -> None:
        return None


def refused(fn, *words: str) -> str:
    """Decorates ``fn`` without a name on a fresh store; the refusal's text, which must say to
    pass ``name=`` and hold ``words``."""
    with pytest.raises(toolonce.ConfigError) as err:
        toolonce.write(toolonce.open_store("memory://"))(fn)
    text = str(err.value)
    assert "name=" in text, text
    for word in words:
        assert word in text, text
    return text


def test_the_default_name_of_a_module_level_def_is_its_module_and_qualified_name():
    assert Billing.refund.tool_name == f"{__name__}.Billing.refund"


def test_two_lambdas_of_one_module_are_refused_so_neither_replays_the_other():
    refused(send_a, "lambda", "test_names.py")
    refused(send_b, "lambda", "<lambda>")


def test_a_functools_partial_is_refused_as_its_repr_differs_in_every_process():
    refused(functools.partial(charge, "acct_1"), "functools.partial", f"{__name__}.charge", "repr")


def test_a_callable_object_is_refused_as_its_repr_differs_in_every_process():
    refused(Mailer("acct_1"), f"instance of {__name__}.Mailer", "repr")


def test_a_function_defined_inside_a_function_is_refused_as_each_call_makes_another():
    def make_sender(account: str):
        def send(to: str) -> dict:
            return {"account": account, "to": to}

        return send

    refused(make_sender("acct_1"), "make_sender", "<locals>")


def test_a_method_bound_to_an_instance_is_refused_as_every_instance_shares_its_name():
    refused(Mailer("acct_1").send, "Mailer.send", f"instance of {__name__}.Mailer")
    refused(Mailer.send.__get__(Mailer("acct_2")), "bound")


def test_two_different_tools_under_one_name_on_one_store_are_refused_naming_both():
    store = toolonce.open_store("memory://")
    toolonce.write(store, name="send")(send_a)
    with pytest.raises(toolonce.ConfigError) as err:
        toolonce.write(store, name="send")(charge)
    text = str(err.value)
    assert "'send'" in text and "name=" in text, text
    assert "lambda" in text and f"{__name__}.charge" in text, text
    # Another store is another set of tools; the first name still belongs to the first tool.
    toolonce.write(toolonce.open_store("memory://"), name="send")(charge)
    toolonce.write(store, name="send")(send_a)


def test_one_function_registered_twice_under_its_name_is_one_tool(run_id):
    store = toolonce.open_store("memory://")
    first = toolonce.write(store)(charge)
    again = toolonce.write(store)(charge)
    bound = Mailer("acct_1")
    one = toolonce.write(store, name="mailer_send")(bound.send)
    other = toolonce.write(store, name="mailer_send")(bound.send)  # a new bound-method object
    assert first.tool_name == again.tool_name == f"{__name__}.charge"
    assert first(account="a", cents=1, scope=run_id) == again(account="a", cents=1, scope=run_id)
    assert one(to="x", scope=run_id) == other(to="x", scope=run_id)
    with pytest.raises(toolonce.ConfigError, match="mailer_send"):
        toolonce.write(store, name="mailer_send")(Mailer("acct_2").send)


def test_a_def_run_again_in_its_module_replaces_the_tool_of_its_name():
    # importlib.reload, or a notebook cell run again, makes a new function of the same module
    # and qualified name: the same tool, not a second one.
    store = toolonce.open_store("memory://")
    source = "@toolonce.write(store, name='send')\ndef send(to: str) -> str:\n    return to\n"
    for _ in range(2):
        namespace = {"__name__": "reloaded", "toolonce": toolonce, "store": store}
        exec(compile(source, "reloaded.py", "exec"), namespace)
    namespace = {"__name__": "reloaded", "toolonce": toolonce, "store": store}
    with pytest.raises(toolonce.ConfigError, match="reloaded.send_other"):
        exec(compile(source.replace("def send", "def send_other"), "reloaded.py", "exec"), namespace)


def test_each_refused_callable_works_with_its_own_name_and_replays_only_its_own_result(store, run_id):
    def make_sender(account: str):
        def send(to: str) -> dict:
            return {"account": account, "to": to}

        return send

    tools = {
        "send_a": send_a,
        "send_b": send_b,
        "charge_acct_1": functools.partial(charge, "acct_1"),
        "charge_acct_2": functools.partial(charge, "acct_2"),
        "mailer_object": Mailer("acct_1"),
        "mailer_1": Mailer("acct_1").send,
        "mailer_2": Mailer("acct_2").send,
        "closure_1": make_sender("acct_1"),
        "closure_2": make_sender("acct_2"),
    }
    results = {}
    for name, fn in tools.items():
        wrapped = toolonce.write(store, name=name)(fn)
        args = {"cents": 5} if name.startswith("charge") else {"to": "ada@example.com"}
        first = wrapped(**args, scope=run_id)
        again = wrapped.call_detailed(**args, scope=run_id)
        assert (again.outcome, again.value) == ("replayed", first), name
        assert wrapped.tool_name == name
        results[name] = first
    assert results["send_a"]["sent"] == "a" and results["send_b"]["sent"] == "b"
    assert results["charge_acct_2"]["account"] == "acct_2"
    assert results["mailer_2"]["account"] == results["closure_2"]["account"] == "acct_2"


SPAWNED = textwrap.dedent(
    '''
    import multiprocessing
    import os
    import sys

    import toolonce

    store = toolonce.open_store(os.environ["QS_STORE"])

    @toolonce.write(store)
    def send_email(to: str) -> dict:
        with open(os.environ["QS_SENT"], "a") as f:
            f.write(to + "\\n")
        return {"sent_by": os.getpid()}

    def call():
        print(send_email.tool_name, send_email(to="ada@example.com", scope="run-42"), flush=True)

    if __name__ == "__main__":
        call()
        child = multiprocessing.get_context("spawn").Process(target=call)
        child.start()
        child.join()
        sys.exit(child.exitcode)
    '''
)


def test_a_script_s_tool_in_a_spawned_worker_process_has_the_script_s_name_and_replays(tmp_path):
    # multiprocessing's spawn (and forkserver) start methods import the parent's script in the
    # child as `__mp_main__`, not `__main__`: the same tool, the same name.
    (tmp_path / "qs.py").write_text(SPAWNED)
    sent = tmp_path / "sent.log"
    env = {"QS_STORE": f"sqlite://{tmp_path / 'toolonce.db'}", "QS_SENT": str(sent)}
    for args in (["qs.py"], ["-m", "qs"]):
        parent, child = run(args, tmp_path, env).splitlines()
        assert parent == child, (parent, child)
        assert parent.startswith("qs.send_email {'sent_by': ")
    assert sent.read_text().splitlines() == ["ada@example.com"]


def test_a_script_whose_file_name_is_no_module_name_is_refused_saying_so(tmp_path):
    (tmp_path / "send-email.py").write_text(
        textwrap.dedent(
            '''
            import toolonce
            store = toolonce.open_store("memory://")
            try:
                @toolonce.write(store)
                def send_email(to: str) -> None:
                    pass
            except toolonce.ConfigError as e:
                print("refused:", e)
            '''
        )
    )
    out = run(["send-email.py"], tmp_path, {})
    assert "refused:" in out and "send-email.py" in out and "name=" in out, out
