"""What a catch-up worker imports: every module it loads is held in each worker's memory (and in
ccotel run's), so none that plain-http export and the read do not use."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from ccotel.hashing import blake2b, sha256


def test_the_run_modules_import_neither_openssl_nor_http_client_nor_email() -> None:
    unused = ("hashlib", "_hashlib", "ssl", "http.client", "email.utils")
    code = ("import sys, ccotel.run.runner, ccotel.run.catchup, ccotel.commands.run; "
            f"print(sorted(m for m in {unused!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_digests_are_hashlibs() -> None:
    for data in (b"", b"abc", "é\x1f".encode() * 1000):
        assert blake2b(data, digest_size=8).hexdigest() == hashlib.blake2b(data, digest_size=8).hexdigest()
        assert blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
