"""The pytest plugin (R-V3) as an App author uses it: a test file in a project of their own, run by pytest in
a subprocess with only Workrun installed (its entry point loads the plugin), proving the tutorial's
``compensate.py``: it undoes ``create`` after an injected failure, and after a crash at each fault point of the
compensation phase the run resumes to a complete compensation, the file removed once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AUTHOR_TESTS = '''
import os
from pathlib import Path

import pytest

from workrun.testing import FAULT_POINTS, crash_at, fail_after

TUTORIAL = Path(os.environ["TUTORIAL"])


def _create(view):
    return next(o for o in view["operations"] if o["node_key"] == "create")


def test_the_fixtures(workrun_home, workrun_api):
    assert workrun_home.is_dir() and os.environ["WORKRUN_HOME"] == str(workrun_home)
    assert workrun_api.runs() == []
    assert "attempt.started" in FAULT_POINTS and "op.intent" in FAULT_POINTS


def test_create_is_undone_after_an_injected_failure(workrun_api):
    with fail_after("create"):
        view = workrun_api.run(TUTORIAL)
    create = _create(view)
    assert view["status"] == "failed" and "injected" in view["reason"]
    assert [n["status"] for n in view["nodes"]] == ["succeeded", "skipped"]  # boom never started
    assert create["compensation"]["status"] == "succeeded"
    assert not Path(create["result"]["file_path"]).exists()
    assert workrun_api.show(view["run_id"])["verify"] is False  # an ordinary run
    assert len(workrun_api.runs()) == 1


# every compensation-phase point is reached by an ordinary failing run: ``comp.status`` too (an attempt's intent
# changes its compensation's status; conformance review: it was committed only by a hold, a release or an operator)
@pytest.mark.parametrize("point", ["run.failed", "comp.status", "attempt.intent", "attempt.started",
                                   "attempt.finished"])
def test_a_crash_in_compensation_then_resume(workrun_api, point):
    import warnings

    from workrun.testing import CrashNotReached

    with warnings.catch_warnings(), fail_after("create"), crash_at(point):
        warnings.simplefilter("error", CrashNotReached)  # killed there: never warned
        view = workrun_api.run(TUTORIAL)
    assert view["status"] in ("running", "failed")  # the journal's view of what the killed run left
    workrun_api.resume()  # picks up what the kill left (nothing, when it came after the last commit)
    run = workrun_api.show(view["run_id"])
    assert run["status"] == "failed" and run["compensation"] == "complete", run["compensation"]
    create = _create(run)
    assert create["compensation"]["status"] == "succeeded", create["compensation"]
    assert len([a for a in create["compensation"]["attempts"] if a["status"] == "succeeded"]) == 1
    assert not Path(create["result"]["file_path"]).exists()


def test_rerun_takes_the_injections_too(workrun_api):
    first = workrun_api.run(TUTORIAL)
    with fail_after("create"):
        again = workrun_api.rerun(first["run_id"])
    assert again["run_id"] != first["run_id"] and [n["status"] for n in again["nodes"]] == ["succeeded", "skipped"]
    with fail_after("create"), crash_at("attempt.started"):
        killed = workrun_api.rerun(first["run_id"])
    assert killed["rerun_of"] == first["run_id"] and killed["status"] in ("running", "failed")
    assert _create(killed)["compensation"]["status"] == "running"  # killed with its attempt journaled
    workrun_api.resume()
    assert workrun_api.show(killed["run_id"])["compensation"] == "complete"


def test_a_crash_run_refused_by_a_busy_home_is_exit_3_not_another_run(workrun_api, workrun_home):
    from workrun.core.lock import SchedulerLock

    workrun_api.run(TUTORIAL)  # a run is there already: it is never taken for the refused one
    lock = SchedulerLock(workrun_home).acquire()
    try:
        with pytest.raises(workrun_api.WorkrunError) as err, crash_at("op.intent"):
            workrun_api.run(TUTORIAL)
    finally:
        lock.release()
    assert err.value.exit_code == 3


def test_a_crash_as_the_run_is_recorded_returns_that_run_and_never_another(workrun_api):
    with crash_at("run.created"):
        first = workrun_api.run(TUTORIAL)  # killed as its run was recorded: that run, unfinished
    assert first["status"] == "running" and [r["run_id"] for r in workrun_api.runs()] == [first["run_id"]]
    with pytest.raises(workrun_api.WorkrunError), crash_at("node.running"):
        workrun_api.run(TUTORIAL)  # killed while resuming the first, before its own run: no run to return


def test_a_crash_point_the_run_never_reaches_is_warned_not_passed_off_as_a_crash(workrun_api):
    """New-user review: the tutorial's one compensation makes one attempt, so its 5th ``attempt.started`` never
    comes; the finished run is returned with a CrashNotReached warning (a crash test that killed nothing is
    seen), and a reached point warns nothing."""
    import warnings

    from workrun.testing import CrashNotReached

    with pytest.warns(CrashNotReached, match=r"commit 5 of attempt.started: nothing was killed"), \
            fail_after("create"), crash_at("attempt.started", n=5):
        view = workrun_api.run(TUTORIAL)
    assert view["status"] == "failed" and view["compensation"] == "complete"  # the run went its way
    with warnings.catch_warnings():
        warnings.simplefilter("error", CrashNotReached)
        with fail_after("create"), crash_at("attempt.started"):
            assert workrun_api.run(TUTORIAL)["compensation"] != "complete"


def test_an_unknown_node_or_point_is_refused(workrun_api):
    with pytest.raises(workrun_api.WorkrunError) as err:
        with fail_after("nope"):
            workrun_api.run(TUTORIAL)
    assert err.value.exit_code == 2
    assert err.value.message.startswith("fail_after: no node 'nope'")  # what the caller wrote, not a CLI option
    with pytest.raises(ValueError):
        crash_at("no.such.point")
'''


def test_an_app_author_proves_the_tutorials_compensation_with_the_plugin(tmp_path):
    (tmp_path / "test_my_app.py").write_text(textwrap.dedent(AUTHOR_TESTS))
    env = {"TUTORIAL": str(ROOT / "demo_apps" / "workflows" / "tutorial.toml"), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path / "test_my_app.py")], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "12 passed" in proc.stdout, proc.stdout[-2000:]


def test_a_wrong_assertion_in_an_authors_test_fails(tmp_path):
    """The plugin's fixtures really run workflows: a test expecting the wrong outcome fails."""
    (tmp_path / "test_wrong.py").write_text(textwrap.dedent('''
        import os
        from workrun.testing import fail_after

        def test_expects_the_wrong_status(workrun_api):
            with fail_after("create"):
                view = workrun_api.run(os.environ["TUTORIAL"])
            assert view["status"] == "succeeded"   # wrong: the run failed and was compensated
    '''))
    env = {"TUTORIAL": str(ROOT / "demo_apps" / "workflows" / "tutorial.toml"), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path / "test_wrong.py")], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout[-2000:]
    assert "'failed' == 'succeeded'" in proc.stdout
