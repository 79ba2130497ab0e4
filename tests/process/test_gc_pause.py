"""rltrain.process.gc_pause: collection held during start-up, frozen and back on before training.

Each case runs in a child interpreter so that the suite's own collector is left as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _child(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def test_hold_then_release_freezes_what_startup_made_and_collects_again() -> None:
    out = _child("""
        import gc
        from rltrain.process import gc_pause as garbage
        garbage.hold()
        held = gc.isenabled()
        made = [[i] for i in range(1000)]
        garbage.release()
        print(held, gc.isenabled(), gc.get_freeze_count() >= 1000)
        garbage.release()  # a second job of a sweep: nothing more
        print(gc.isenabled())
    """)
    assert out.split() == ["False", "True", "True", "True"]


def test_release_leaves_a_collector_it_did_not_turn_off_alone() -> None:
    # a host that turned collection off itself keeps it off: release undoes only hold's work
    out = _child("""
        import gc
        from rltrain.process import gc_pause as garbage
        gc.disable()
        garbage.hold()
        garbage.release()
        print(gc.isenabled(), gc.get_freeze_count())
    """)
    assert out.split() == ["False", "0"]


def test_a_run_trains_with_collection_on(tmp_path) -> None:
    # the rltrain command holds collection at its start and a run releases it before
    # training: a run's first callback sees the collector on, with start-up frozen
    out = _child(f"""
        import gc, sys
        import rltrain.commands.train as cli
        import rltrain.trainers as trainer
        seen = []
        run = trainer.Trainer.run
        def spy(self):
            seen.append((gc.isenabled(), gc.get_freeze_count() > 10000))
            return run(self)
        trainer.Trainer.run = spy
        cli.fast_exit = lambda code: print(code)
        sys.argv = ["rltrain", "experiment=smoke", "-q", "hydra.run.dir={tmp_path}/run"]
        cli.main()
        print(seen)
    """)
    assert out.splitlines()[-2:] == ["0", "[(True, True)]"]
