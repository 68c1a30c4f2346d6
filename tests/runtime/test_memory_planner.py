"""The arena planner: no two values alive at the same step overlap, a step's output never
shares memory with its inputs, and memory is reused."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pplpy.runtime.memory_planner import ALIGNMENT, Buffer, align, plan_memory


def check(buffers):
    offsets, total = plan_memory(buffers)
    for buf in buffers:
        assert offsets[buf.name] % ALIGNMENT == 0
        assert offsets[buf.name] + buf.nbytes <= total
    for a in buffers:
        for b in buffers:
            if a.name < b.name and a.first <= b.last and b.first <= a.last:
                a0, b0 = offsets[a.name], offsets[b.name]
                assert a0 + align(max(a.nbytes, 1)) <= b0 or b0 + align(max(b.nbytes, 1)) <= a0, \
                    (a, b, offsets)
    return offsets, total


buffers_strategy = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 30), st.integers(0, 10)), max_size=60
).map(lambda rows: [Buffer(f"v{i}", size, first, first + span)
                    for i, (size, first, span) in enumerate(rows)])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(buffers_strategy)
def test_live_values_never_overlap(buffers):
    check(buffers)


def test_a_chain_reuses_two_buffers():
    buffers = [Buffer(f"v{i}", 1000, i, i + 1) for i in range(100)]
    _, total = check(buffers)
    assert total == 2 * align(1000)


def test_freed_space_is_merged_and_reused():
    buffers = [Buffer("a", 100, 0, 1), Buffer("b", 100, 0, 1), Buffer("c", 250, 2, 3)]
    offsets, total = check(buffers)
    assert offsets["c"] == 0 and total == align(250)
