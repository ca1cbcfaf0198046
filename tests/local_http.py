"""A stand-in web server for tests: `http.server` on a free loopback port, served from a thread
of its own while the server is used as a context manager."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Any, Self


class LocalHTTPServer(ThreadingHTTPServer):
    """Serves `handler` at `origin` (http://127.0.0.1:PORT) inside a `with` block; a request is
    answered on a thread of its own, so one that hangs holds nothing else up."""

    daemon_threads = True

    def __init__(self, handler: Any) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()


__all__ = ["LocalHTTPServer"]
