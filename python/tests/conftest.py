"""Fixtures shared by the Python tests."""

import threading
from typing import Any, Callable, List, Sequence

import pytest


def _run_on_workers(fn: Callable[[Any], Any], workers: Sequence[Any], timeout: float = 60.0) -> List[Any]:
    """Runs fn(w) for every worker, each in its own thread (a collective call such as a barrier
    or a checkpoint needs every worker of the cluster at once), waits at most `timeout` seconds
    in all, and gives back the results in the workers' order. The first exception of any
    thread is raised here; a thread still running at the end fails the test."""
    results: List[Any] = [None] * len(workers)
    errors: List[BaseException] = []

    def run(i: int, w: Any) -> None:
        try:
            results[i] = fn(w)
        except BaseException as e:  # reported by the calling thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, w), daemon=True) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        for t in threads:
            while t.is_alive() and not deadline.is_set():
                t.join(0.05)
    finally:
        timer.cancel()
    if errors:
        raise errors[0]
    alive = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not alive, f"workers {alive} still running after {timeout} s"
    return results


@pytest.fixture
def run_on_workers() -> Callable[..., List[Any]]:
    """`run_on_workers(fn, workers, timeout=60.0)`: see `_run_on_workers`."""
    return _run_on_workers
