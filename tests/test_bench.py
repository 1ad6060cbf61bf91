"""python -m winrs_jax.bench: what it runs and writes (on the CPU: XLA's and WinRS's columns, no PyTorch)."""

import json

import pytest

from winrs_jax.bench.__main__ import main


def test_shapes_alone_run_just_those_layers(tmp_path, capsys, monkeypatch):
    """--shape without --suite measures the given layers only (the default suite ran too, and on a CPU it is
    minutes of layers the user did not ask for); rows go to stdout whole, without the terminal's progress."""
    out = tmp_path / "rows.jsonl"
    monkeypatch.setenv(
        "WINRS_JAX_CACHE_DIR", str(tmp_path)
    )  # the bench points it at a fresh directory: restored
    main(["--shape", "2:8:4:3", "--dtype", "f32_highest", "--repeats", "1", "--json", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()][1:]  # after the device line
    assert [(r["suite"], r["layer"], r["dtype"]) for r in rows] == [("shape", "3x3 2:8:4", "f32_highest")]
    assert rows[0]["xla_ms"] > 0 and rows[0]["winrs_ms"] > 0
    printed = capsys.readouterr()
    assert "\r" not in printed.err and "shape  3x3 2:8:4" in printed.out


def test_times_are_per_filter_gradient(tmp_path, monkeypatch):
    """A timed call of a short layer runs several filter gradients in one program (choice.repeated_calls): the
    rows give milliseconds per filter gradient."""
    from winrs_jax import choice
    from winrs_jax.bench import suite

    monkeypatch.setenv("WINRS_JAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(
        choice, "per_call_estimate", lambda fn: (0.25e-3, 1)
    )  # 4 repeats make choice.REPEAT_S
    monkeypatch.setattr(suite, "time_ms", lambda fn, repeats, calls: 8.0)  # ms per call of 4
    out = tmp_path / "rows.jsonl"
    main(["--shape", "2:8:4:3", "--dtype", "f32_highest", "--repeats", "1", "--json", str(out)])
    (row,) = [json.loads(line) for line in out.read_text().splitlines()][1:]
    assert (row["xla_ms"], row["winrs_ms"]) == (2.0, 2.0)


def test_kernels_force_the_winrs_column_only(tmp_path, monkeypatch):
    """--kernels I J plans the forced column with that kernel pair (the direct kernel where the planner picks a
    Winograd variant), as PlannerOptions(kernels=...): its plan says so, and its result still matches XLA's."""
    monkeypatch.setenv("WINRS_JAX_CACHE_DIR", str(tmp_path))
    rows = {}
    for name, extra in (("planned", []), ("direct", ["--kernels", "0", "0"])):
        out = tmp_path / f"{name}.jsonl"
        main(["--shape", "2:8:4:3", "--dtype", "f32_highest", "--repeats", "1", "--json", str(out), *extra])
        (rows[name],) = [json.loads(line) for line in out.read_text().splitlines()][1:]
    assert "Omega_2(1, 1) on columns" not in rows["planned"]["plan"]
    assert "Omega_2(1, 1) on columns [0, 8)" in rows["direct"]["plan"]
    assert rows["direct"]["max_rel_diff"] < 1e-5


def test_forced_kernels_leave_autos_column_its_own_plan(tmp_path, monkeypatch):
    """With --kernels, where auto chose WinRS, the auto column times auto's own plan (not the forced kernels'):
    the thirty-eighth stop's run timed auto's choice with the forced pair."""
    import dataclasses

    from winrs_jax.bench import suite

    monkeypatch.setenv("WINRS_JAX_CACHE_DIR", str(tmp_path))
    plan = suite.winrs_jax.plan

    def auto_takes_winrs(*args, options=None, **kwargs):  # on the CPU auto keeps XLA on this layer
        result = plan(*args, options=options, **kwargs)
        if options is not None and options.mode == "auto":
            result = dataclasses.replace(result, choice="WinRS (measured: WinRS 1.000 ms, XLA 2.000 ms)")
        return result

    monkeypatch.setattr(suite.winrs_jax, "plan", auto_takes_winrs)
    out = tmp_path / "rows.jsonl"
    main(["--shape", "2:8:4:3", "--dtype", "f32_highest", "--repeats", "1", "--json", str(out), "--kernels", "0", "0"])
    (row,) = [json.loads(line) for line in out.read_text().splitlines()][1:]
    assert row["auto"] == "winrs" and row["auto_ms"] is not None, row


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shape", "2:8:8"], "--shape"),
        (["--repeats", "0"], "at least 1"),
        (["--kernels", "0", "13"], "--kernels"),
    ],
)
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    """A malformed --shape or a count below 1 stops at the command line with a usage message (they raised a
    ValueError traceback, and a StatisticsError after the layers had run)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err
