"""Threads, the default generator's state and the allocator's counters from Python."""

import pytest

import ember


def test_threads_and_the_same_bits_for_any_count():
    before = ember.get_num_threads()
    g = ember.Generator(5)
    a, b = ember.randn(96, 80, generator=g), ember.randn(80, 64, generator=g)
    results = []
    try:
        for n in (1, 2, 3):
            ember.set_num_threads(n)
            assert ember.get_num_threads() == n
            results.append(((a @ b).softmax(-1).sum(0), ember.layer_norm(a, (80,)) if hasattr(ember, "layer_norm")
                            else a.sum(1)))
    finally:
        ember.set_num_threads(before)
    for r in results[1:]:
        assert all(ember.equal(x, y) for x, y in zip(r, results[0]))
    for bad in (0, -1, 10 ** 6):
        with pytest.raises(ValueError, match="set_num_threads: expected a thread count in"):
            ember.set_num_threads(bad)
    assert ember.get_num_threads() == before


def test_rng_state_round_trip():
    ember.manual_seed(1234)
    assert ember.initial_seed() == 1234
    state = ember.get_rng_state()
    x = ember.randn(5)
    ember.set_rng_state(state)
    assert ember.equal(ember.randn(5), x)
    assert not ember.equal(ember.randn(5), x)
    with pytest.raises(RuntimeError, match="2"):
        ember.set_rng_state([1, 2, 3])


def test_memory_stats_follow_allocations():
    before = ember.memory_stats()
    assert set(before) == {"live_storages", "live_bytes", "peak_bytes", "total_allocations",
                           "system_allocations", "system_bytes", "cached_bytes"}
    t = ember.zeros(1 << 20, dtype=ember.float64)  # 8 MiB
    during = ember.memory_stats()
    assert during["live_bytes"] - before["live_bytes"] >= 8 << 20
    assert during["live_storages"] == before["live_storages"] + 1
    assert during["total_allocations"] > before["total_allocations"]
    del t
    after = ember.memory_stats()
    assert after["live_bytes"] == before["live_bytes"] and after["live_storages"] == before["live_storages"]
    ember.empty_cache()
    assert ember.memory_stats()["cached_bytes"] == 0


def test_peak_bytes_keep_the_most_held_until_reset():
    ember.reset_peak_memory_stats()
    base = ember.memory_stats()["live_bytes"]
    assert ember.memory_stats()["peak_bytes"] == base
    t = ember.zeros(1 << 20, dtype=ember.float64)
    del t
    stats = ember.memory_stats()
    assert stats["live_bytes"] == base and stats["peak_bytes"] >= base + (8 << 20)
    ember.reset_peak_memory_stats()
    assert ember.memory_stats()["peak_bytes"] == base
