"""memory.Heap: large blocks mapped on their own and free heap pages returned (glibc), each
checked in a fresh process (mallopt is process-wide) by what the kernel says the process holds."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ccotel.run.memory import Heap

glibc_only = pytest.mark.skipif(not Heap().available, reason="glibc's malloc only")

_PRELUDE = textwrap.dedent("""
    import sys
    from ccotel.run.memory import Heap

    def anon_kb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
""")


def _run(body: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


@glibc_only
def test_trim_returns_free_pages_inside_the_heap():
    # 200 blocks of 100 KB (below glibc's mmap threshold: from the heap), the last one kept so the
    # heap's top cannot shrink: freeing the others leaves ~20 MB free inside it until a trim.
    out = _run("""
        blocks = [bytes(100_000) for _ in range(200)]
        for b in blocks: b[0]  # touched
        keep = blocks[-1]
        del blocks
        before = anon_kb()
        assert Heap().trim()
        print(before - anon_kb())
    """)
    assert int(out) > 10_000  # KB returned


@glibc_only
def test_large_blocks_are_returned_when_freed():
    # glibc raises its mmap threshold to the size of a mapped block freed: after one 8 MB block,
    # 3 MB blocks come from the heap and stay there when freed (behind a 100 KB block kept after
    # each). With map_large_blocks they are mapped and unmapped.
    body = """
        if FIX:
            assert Heap().map_large_blocks()
        large = bytearray(8 << 20)
        del large
        start = anon_kb()
        blocks = []
        for _ in range(10):
            blocks.append(bytearray(3 << 20))
            blocks.append(bytearray(100_000))  # kept: the heap cannot shrink past it
        del blocks[::2]
        print(anon_kb() - start)
    """
    kept_default = int(_run("FIX = False\n" + textwrap.dedent(body)))
    kept_mapped = int(_run("FIX = True\n" + textwrap.dedent(body)))
    assert kept_default > 20_000  # the 30 MB of freed 3 MB blocks stayed (what the fix is for)
    assert kept_mapped < 4_000


def test_without_glibc_every_call_does_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    heap = Heap()
    assert not heap.available
    assert heap.trim() is False and heap.map_large_blocks() is False


@glibc_only
def test_a_worker_reads_long_lines_without_mapping_a_block_for_each(tmp_path):
    # A catch-up worker maps every block from MMAP_THRESHOLD up, and faults in each page of it.
    # Reading (the tail stage's chunks, a line that crosses them) and the UTF-8 check of a
    # non-ASCII line (its str) stay under it: read again slice by slice as the reader does, 8 MiB
    # of 150 KB lines fault in fewer pages than the 2,048 they span. (With 1 MiB chunks, a line
    # crossing them copied twice and a whole line's str decoded at once: ~3,400.)
    path = tmp_path / "long.jsonl"
    line = b'{"type":"user","text":"' + "é".encode() * 40 + b"x" * 150_000 + b'"}\n'
    path.write_bytes(line * (8 * 2**20 // len(line)))
    out = _run(f"""
        import resource
        from ccotel.read.parse_fast import _check_utf8
        from ccotel.read.tail import Tailer
        from ccotel.run.reader import _READ_SLICE
        assert Heap().map_large_blocks()

        def read():
            t, n = Tailer({str(path)!r}), 0
            while True:
                res = t.read(max_bytes=_READ_SLICE)
                for raw in res.lines:
                    _check_utf8(raw.data)
                n += len(res.lines)
                if not res.more:
                    return n

        assert read() > 50
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        read()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    assert int(out) < 2048
