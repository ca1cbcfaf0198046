"""A local cluster of adk-gateway on one machine, without Docker.

    .venv/bin/python deploy/cluster.py up       # or: make cluster-up
    .venv/bin/python deploy/cluster.py status   # or: make cluster-status
    .venv/bin/python deploy/cluster.py down     # or: make cluster-down
    .venv/bin/python deploy/cluster.py stop redis    # one piece (postgres, redis, gateway-N, nginx) ...
    .venv/bin/python deploy/cluster.py start redis   # ... and back, as `up` started it

`up` starts, on 127.0.0.1 and from Debian's packages (`make system-deps`): one PostgreSQL (the
session store, database `adk`), one Redis (the stream store, no persistence), two gateway processes
(`python -m adk_gateway --host 127.0.0.1 --port P --session-store postgresql://... --stream-store
redis://...`) and nginx round-robin in front of them with the shipped deploy/nginx/adk-gateway.conf
(only its `listen` port, its upstream `server` lines and its access log path are rewritten, by
`render_site_conf`). It waits until every piece answers (PostgreSQL, Redis's PING, each gateway's
/readyz, /healthz through nginx), prints the URL on the last line and returns; the processes run on
in the background. The first gateway is ready before the others start (it makes ADK's tables in a
new database; two making them at once collide). If a piece does not come up, it stops what it
started, prints the tail of that piece's log and exits with status 1.

Everything lives in .state/cluster/<CLUSTER_PORT>/ of the checkout: `cluster.json` (what runs:
names, ports, pids), `logs/` (one file per process, nginx's access and error logs), `postgres/`
(the database, kept between `down` and `up`; delete the folder for a fresh start), `redis/` and
`nginx/` (the rendered configs). `down` stops what `cluster.json` names, each process group with
SIGTERM and, after CLUSTER_STOP_TIMEOUT_S, SIGKILL (PostgreSQL: `pg_ctl stop -m fast` first); it
is safe to run twice. `status` exits 0 when every piece answers, 1 otherwise. `stop NAME` stops
one piece the same way and keeps its record; `start NAME` starts a stopped (or crashed) piece
again with the argv `up` recorded (a gateway's environment is taken from ours, as `up` takes it:
it is never written down), appending to its log: faults to try by hand.

A checkout anywhere: as root, PostgreSQL (user `postgres`) and nginx's workers (`nobody`) must
enter their folders, which they cannot under a folder closed to other users (`mktemp -d`, root's
home). `up` asks the system (`runuser -u USER -- test -x FOLDER`) and, when they cannot, puts
their files (PostgreSQL's data and log, logs/postgres.log then being a link to it; nginx's
temporary folders) in a folder of the cluster's own, `CLUSTER_RUNTIME_DIR/adk-gateway-cluster-
<port>-XXXX` (/var/tmp by default, mode 0711, each piece's folder 0700 and owned by its user),
says so in one line, and records it in cluster.json; `down` deletes it (the database with it: a
new `up` starts an empty one). When even that folder cannot be made, `up` says why in one line
and how to fix it (CLUSTER_RUNTIME_DIR, or a checkout they may enter), and starts nothing.

Settings, from the environment:
    CLUSTER_PORT            nginx's port (default 8088); it also names the state folder
    CLUSTER_GATEWAY_PORTS   comma-separated, one gateway per port (default CLUSTER_PORT+1,+2)
    CLUSTER_POSTGRES_PORT   default CLUSTER_PORT+3
    CLUSTER_REDIS_PORT      default CLUSTER_PORT+4
    CLUSTER_START_TIMEOUT_S how long `up` waits for each piece (default 90)
    CLUSTER_STOP_TIMEOUT_S  how long `down` waits after SIGTERM (default 20; the gateways drain
                            for up to twice ADK_GATEWAY_SHUTDOWN_TIMEOUT_S)
    CLUSTER_RUNTIME_DIR     where a folder for files other users must reach goes, when they cannot
                            enter the checkout (default /var/tmp)
The rest of the environment reaches the gateways as it is (ADK_GATEWAY_* settings such as
ADK_GATEWAY_AUTH=jwt and ADK_GATEWAY_AUTH_JWT_SECRET, GOOGLE_API_KEY); their --host, --port,
--session-store and --stream-store are set here and win over the environment. Unless the
environment names them, both gateways share a URL signing secret (made once, in the state folder)
and an artifact folder (`artifacts/` there), so a link or a sign-in made on one works on the other.

Running as root: PostgreSQL refuses to, so its commands run as the `postgres` user
(`runuser -u postgres --`) in a folder owned by it; nginx's workers run as `nobody` (see "A
checkout anywhere" above). PostgreSQL trusts every connection from 127.0.0.1 (`initdb -A trust`):
a cluster for one machine, never for a shared host.

Python's standard library only; Linux (process groups are read from /proc).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SITE_CONF = ROOT / "deploy" / "nginx" / "adk-gateway.conf"
HOST = "127.0.0.1"
DEFAULT_PORT = 8088
STATE_FILE = "cluster.json"
DEFAULT_RUNTIME_BASE = "/var/tmp"
RUNTIME_PREFIX = "adk-gateway-cluster-"
HINT = "run `make system-deps` (installs nginx-light, redis-server and postgresql)"


class ClusterError(Exception):
    """A step failed; the message says which and why."""


# --- the nginx site -----------------------------------------------------------------------------


def render_site_conf(text: str, *, listen_port: int, upstreams: list[int], read_timeout: str | None = None,
                     access_log: Path | None = None) -> str:
    """deploy/nginx/adk-gateway.conf with our `listen` port (on 127.0.0.1) and upstream ports,
    optionally another `proxy_read_timeout`, and the access log moved to `access_log`. The
    upstream servers keep the parameters of the shipped file's first `server` line (max_fails...).
    Raises ValueError if the file no longer has the lines it rewrites."""
    if access_log is not None:
        text, logs = re.subn(r"(?m)^(\s*)access_log\s+\S+", lambda m: f'{m.group(1)}access_log "{access_log}"', text)
        if logs < 1:
            raise ValueError("deploy/nginx/adk-gateway.conf has no access_log line")
    text, listens = re.subn(r"(?m)^(\s*)listen\s+[^;]+;", rf"\1listen {HOST}:{listen_port};", text)

    def upstream(match: re.Match[str]) -> str:
        first = re.search(r"(?m)^\s*server\s+\S+?([ \t][^;]*)?;", match.group(2))
        params = (first.group(1) or "") if first else ""
        servers = "".join(f"    server {HOST}:{port}{params};\n" for port in upstreams)
        body = re.sub(r"(?m)^\s*server\s+[^;]+;[^\n]*\n", "", match.group(2))
        return match.group(1) + servers + body + match.group(3)

    text, blocks = re.subn(r"(upstream\s+adk_gateway\s*\{\n)(.*?)(\n\})", upstream, text, flags=re.S)
    timeouts = 1
    if read_timeout is not None:
        text, timeouts = re.subn(r"proxy_read_timeout\s+[^;]+;", f"proxy_read_timeout {read_timeout};", text)
    if not (listens >= 1 and blocks == 1 and timeouts >= 1):
        raise ValueError(
            "deploy/nginx/adk-gateway.conf changed shape: it needs a `listen` line, an "
            "`upstream adk_gateway { server ...; }` block and `proxy_read_timeout` lines"
        )
    return text


# --- settings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    port: int
    gateway_ports: tuple[int, ...]
    postgres_port: int
    redis_port: int
    start_timeout_s: float
    stop_timeout_s: float

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def state(self) -> Path:
        return ROOT / ".state" / "cluster" / str(self.port)


def _port(name: str, raw: str) -> int:
    try:
        port = int(raw.strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ClusterError(f"{name}={raw!r} is not a port number")
    return port


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if value <= 0:
        raise ClusterError(f"{name}={raw!r} is not a positive number of seconds")
    return value


def load_config(env: Mapping[str, str]) -> Config:
    port = _port("CLUSTER_PORT", env.get("CLUSTER_PORT") or str(DEFAULT_PORT))

    def derived(name: str, offset: int) -> int:
        return _port(name, env.get(name) or str(port + offset))

    raw_gateways = env.get("CLUSTER_GATEWAY_PORTS") or f"{port + 1},{port + 2}"
    gateways = tuple(_port("CLUSTER_GATEWAY_PORTS", p) for p in raw_gateways.split(",") if p.strip())
    if not gateways:
        raise ClusterError("CLUSTER_GATEWAY_PORTS names no port")
    config = Config(
        port=port,
        gateway_ports=gateways,
        postgres_port=derived("CLUSTER_POSTGRES_PORT", 3),
        redis_port=derived("CLUSTER_REDIS_PORT", 4),
        start_timeout_s=_seconds(env, "CLUSTER_START_TIMEOUT_S", 90.0),
        stop_timeout_s=_seconds(env, "CLUSTER_STOP_TIMEOUT_S", 20.0),
    )
    ports = [config.port, *config.gateway_ports, config.postgres_port, config.redis_port]
    if len(set(ports)) != len(ports):
        raise ClusterError(f"the cluster's ports must differ: {ports}")
    return config


# --- processes ----------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent pid, process group, start time in clock ticks) of a process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def start_ticks(pid: int) -> int:
    stat = _proc_stat(pid)
    return stat[3] if stat else 0


def alive(pid: int, started: int) -> bool:
    """Whether process `pid` still runs (a zombie does not) and is the one that started at `started`."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z" and stat[3] == started


def processes_of(service: Mapping[str, Any]) -> dict[int, int]:
    """The live processes of a recorded service, pid -> start time: its process group (each service
    leads a session of its own, nginx's workers included) and the leader's descendants (PostgreSQL's
    children each lead a session of their own). Empty when the pid now belongs to another process."""
    pid, started = int(service["pid"]), int(service.get("started", 0))
    table: dict[int, tuple[str, int, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[0] != "Z":
                table[int(entry.name)] = stat
    leader = table.get(pid)
    if leader is not None and leader[3] != started:
        return {}  # the pid was reused by something else
    found = {p: stat[3] for p, stat in table.items() if stat[2] == pid}
    children: dict[int, list[int]] = {}
    for p, stat in table.items():
        children.setdefault(stat[1], []).append(p)
    frontier = [pid] if leader is not None else []
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found[child] = table[child][3]
                frontier.append(child)
    return found


def leader_alive(service: Mapping[str, Any]) -> bool:
    return alive(int(service["pid"]), int(service.get("started", 0)))


def _signal(pids: Mapping[int, int], pgid: int, sig: int) -> None:
    """`sig` to process group `pgid` and to each process of `pids` that is still the same process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid, started in pids.items():
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def stop_services(services: list[Mapping[str, Any]], timeout_s: float) -> None:
    """SIGTERM (PostgreSQL: SIGINT, its fast shutdown) to each service's processes, then SIGKILL
    to whatever is left after `timeout_s`; raises ClusterError if something outlives that."""
    tracked = {str(s["name"]): processes_of(s) for s in services}
    pending = [s for s in services if tracked[str(s["name"])]]

    def left(service: Mapping[str, Any]) -> bool:
        mine = tracked[str(service["name"])]
        mine.update(processes_of(service))  # and whatever it started meanwhile
        return any(alive(pid, started) for pid, started in mine.items())

    for service in pending:
        term = signal.SIGINT if service["kind"] == "postgres" else signal.SIGTERM
        _signal({}, int(service["pid"]), term)
    for sig, wait_s in ((signal.SIGKILL, timeout_s), (None, 5.0)):
        deadline = time.monotonic() + wait_s
        while pending and time.monotonic() < deadline:
            time.sleep(0.1)
            pending = [s for s in pending if left(s)]
        if sig is None:
            break
        for service in pending:
            _signal(tracked[str(service["name"])], int(service["pid"]), sig)
    if pending:
        names = ", ".join(f"{s['name']} (pid {s['pid']})" for s in pending)
        raise ClusterError(f"could not stop {names}")


def log_tail(path: Path | str, lines: int = 30) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) if tail else "(empty log)"


def shown(path: Path | str) -> str:
    """A path as printed: relative to the checkout when it is inside it."""
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(ROOT))
    return str(path)


# --- binaries and users -------------------------------------------------------------------------


def binary(name: str, *candidates: str) -> str:
    for candidate in (*candidates, shutil.which(name)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterError(f"`{name}` is not installed: {HINT}")


def postgres_bin_dir() -> Path:
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()),
        key=lambda p: int(p.parent.name),
    )
    for candidate in reversed(versions):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise ClusterError(f"PostgreSQL (initdb) is not installed: {HINT}")


def as_postgres() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs PostgreSQL's commands (runuser as root), and the user to own its files."""
    if os.geteuid() != 0:
        return [], None
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterError(f"running as root needs the `postgres` user for PostgreSQL: {HINT}") from None
    return [binary("runuser", "/usr/sbin/runuser", "/sbin/runuser"), "-u", "postgres", "--"], owner


def reaches(user: pwd.struct_passwd, folder: Path) -> bool:
    """Whether `user` may enter `folder`, and so every folder above it: asked of the system, as that
    user (modes, ACLs and all)."""
    runuser = binary("runuser", "/usr/sbin/runuser", "/sbin/runuser")
    test = shutil.which("test") or "/usr/bin/test"
    result = subprocess.run([runuser, "-u", user.pw_name, "--", test, "-x", str(folder)], check=False,
                            capture_output=True, timeout=30, stdin=subprocess.DEVNULL, cwd="/")
    return result.returncode == 0


def nginx_worker() -> pwd.struct_passwd | None:
    """The user nginx's workers run as when its master is root (no `user` line: nginx's default,
    `nobody`); None when we are not root (the workers are us)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        raise ClusterError("running as root needs the `nobody` user for nginx's workers") from None


def gateway_python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def clear_stale_postmaster_pid(data: Path) -> None:
    """Removes PostgreSQL's lock file when the process it names is gone or is no postgres (PostgreSQL
    would refuse to start while any process has that pid, and a zombie does: not every init reaps)."""
    lock = data / "postmaster.pid"
    try:
        pid = int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    stat = _proc_stat(pid)
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = ""
    if stat is None or stat[0] == "Z" or comm not in ("postgres", "postmaster"):
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


# --- checks -------------------------------------------------------------------------------------

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status a GET of `url` answers (never through an HTTP proxy), or None if nothing answers."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def redis_pong(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def postgres_ready(bin_dir: str, port: int) -> bool:
    pg_isready = Path(bin_dir) / "pg_isready"
    if pg_isready.exists():
        result = subprocess.run([str(pg_isready), "-q", "-h", HOST, "-p", str(port), "-U", "postgres",
                                 "-d", "postgres", "-t", "2"],
                                check=False, capture_output=True, timeout=10)
        return result.returncode == 0
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=2):
        return True
    return False


def port_in_use(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
        return True
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no obstacle
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def answers(service: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a service answers its check, and what it answered."""
    kind, port = service["kind"], int(service["port"])
    if kind == "postgres":
        ok = postgres_ready(str(service["bin_dir"]), port)
        return ok, "accepts connections" if ok else "no answer"
    if kind == "redis":
        ok = redis_pong(port)
        return ok, "PONG" if ok else "no PONG"
    path = "/readyz" if kind == "gateway" else "/healthz"
    status = http_status(f"http://{HOST}:{port}{path}")
    return status == 200, f"{path} {status if status is not None else 'no answer'}"


# --- state --------------------------------------------------------------------------------------


def read_state(config: Config) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((config.state / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state


def write_state(config: Config, state: Mapping[str, Any]) -> None:
    path = config.state / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


# --- up -----------------------------------------------------------------------------------------


class Starter:
    """Starts the pieces one after the other, recording each in cluster.json as soon as it runs."""

    def __init__(self, config: Config, record: dict[str, Any] | None = None) -> None:
        self.config = config
        self.state = config.state
        self.logs = self.state / "logs"
        self.record: dict[str, Any] = record or {"url": config.url, "port": config.port, "services": []}

    def add(self, service: dict[str, Any]) -> dict[str, Any]:
        """Records a running piece (in place of its earlier record, when it is started again)."""
        services: list[dict[str, Any]] = self.record["services"]
        for index, known in enumerate(services):
            if known["name"] == service["name"]:
                services[index] = service
                break
        else:
            services.append(service)
        write_state(self.config, self.record)
        return service

    def spawn(self, name: str, kind: str, port: int, argv: list[str], log: Path, *,
              env: Mapping[str, str] | None = None, append: bool = False, **extra: Any) -> dict[str, Any]:
        """Starts a process in a session of its own (so `down` can stop its whole group), its
        output written to `log` (a new one at each `up`; `append` for a piece started again),
        detached from our terminal and pipes. Its argv is recorded (never its environment, which
        may hold secrets), so `start NAME` can start it again."""
        with log.open("ab" if append else "wb") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        return self.add({"name": name, "kind": kind, "port": port, "pid": proc.pid,
                         "started": start_ticks(proc.pid), "log": str(log), "argv": argv, **extra})

    def wait(self, service: dict[str, Any]) -> None:
        """Waits until the service answers; fails with its log tail if it exits or does not answer."""
        deadline = time.monotonic() + self.config.start_timeout_s
        last = ""
        while True:
            ok, last = answers(service)
            if ok:
                break
            if not leader_alive(service):
                raise ClusterError(f"{service['name']} exited at start; the end of {shown(service['log'])}:\n"
                                   f"{log_tail(service['log'])}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{service['name']} did not answer within {self.config.start_timeout_s:.0f} s "
                                   f"(last: {last}); the end of {shown(service['log'])}:\n{log_tail(service['log'])}")
            time.sleep(0.2)
        print(f"  {service['name']:<10} {HOST}:{service['port']:<6} pid {service['pid']:<8} ready ({last})",
              flush=True)

    # -- folders other users must reach --

    def runtime(self, why: str) -> Path:
        """The cluster's own folder outside the checkout (under CLUSTER_RUNTIME_DIR, /var/tmp by
        default), for the files of pieces that run as another user who cannot enter the checkout
        (`why` says who). Made once per `up`, recorded in cluster.json; `down` deletes it."""
        known = self.record.get("runtime")
        if known:
            return Path(known)
        base = Path(os.environ.get("CLUSTER_RUNTIME_DIR") or DEFAULT_RUNTIME_BASE)
        try:
            path = Path(tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{self.config.port}-", dir=base))
            path.chmod(0o711)  # its users enter their own folders in it; nobody lists it
        except OSError as exc:
            raise ClusterError(f"{why}, and {base} cannot hold a folder for its files ({exc.strerror}): set "
                               "CLUSTER_RUNTIME_DIR to a folder every user may enter, or clone the repository "
                               "where they may (e.g. under /srv or /opt)") from None
        self.record["runtime"] = str(path)
        write_state(self.config, self.record)
        print(f"  {why}: its files go to {path} (deleted by `down`)", flush=True)
        return path

    def folder_for(self, user: pwd.struct_passwd, name: str, inside: Path, why: str) -> Path:
        """`inside` (a folder of the checkout) when `user` may enter it, else `name` in the cluster's
        runtime folder, owned by `user`."""
        if reaches(user, inside):
            return inside
        folder = self.runtime(why) / name
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chown(folder, user.pw_uid, user.pw_gid)
        if not reaches(user, folder):
            raise ClusterError(f"{why}, nor {folder}: set CLUSTER_RUNTIME_DIR to a folder every user may enter")
        return folder

    # -- PostgreSQL --

    def postgres(self) -> dict[str, Any]:
        bin_dir = postgres_bin_dir()
        prefix, owner = as_postgres()
        folder = self.state / "postgres"
        log = self.logs / "postgres.log"
        if owner is not None:
            outside = self.folder_for(owner, "postgres", self.state,
                                      f"PostgreSQL runs as `postgres`, which cannot enter {self.state}")
            if outside != self.state:
                folder, link = outside, log
                log = folder / "postgres.log"
                link.unlink(missing_ok=True)
                link.symlink_to(log)  # the log is still found where the others are
        data = folder / "data"
        folder.mkdir(mode=0o700, exist_ok=True)
        log.touch()
        if owner is not None:
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            os.chown(log, owner.pw_uid, owner.pw_gid)
        version_file = data / "PG_VERSION"
        if not version_file.exists():
            postgres_run(prefix, folder, log, [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust",
                                               "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
                         what="initdb", timeout=180)
        elif version_file.read_text().strip() != bin_dir.parent.name and bin_dir.parent.name.isdigit():
            raise ClusterError(f"{shown(data)} was made by PostgreSQL {version_file.read_text().strip()}, "
                               f"this is {bin_dir.parent.name}: delete {shown(self.state)} for a new cluster")
        options = " ".join(shlex.quote(o) for o in (
            "-p", str(self.config.postgres_port), "-c", f"listen_addresses={HOST}",
            "-c", "unix_socket_directories=", "-c", "synchronous_commit=off",
        ))
        service = {"name": "postgres", "kind": "postgres", "port": self.config.postgres_port, "log": str(log),
                   "bin_dir": str(bin_dir), "data": str(data), "folder": str(folder), "options": options,
                   "as_postgres": prefix}
        self.start_postgres(service)
        created = subprocess.run([str(bin_dir / "createdb"), "-h", HOST, "-p", str(self.config.postgres_port),
                                  "-U", "postgres", "adk"], check=False, capture_output=True, text=True, timeout=60)
        if created.returncode != 0 and "already exists" not in created.stderr:
            raise ClusterError(f"PostgreSQL: createdb adk failed: {created.stderr.strip()}")
        self.wait(service)
        return service

    def start_postgres(self, service: dict[str, Any]) -> None:
        """`pg_ctl start` of a recorded PostgreSQL; records its pid."""
        prefix, data, log = list(service["as_postgres"]), Path(service["data"]), Path(service["log"])
        folder, pg_ctl = Path(service.get("folder") or data.parent), str(Path(service["bin_dir"]) / "pg_ctl")
        clear_stale_postmaster_pid(data)
        try:
            wait_s = self.config.start_timeout_s
            postgres_run(prefix, folder, log, [pg_ctl, "-D", str(data), "-l", str(log), "-o", service["options"],
                                               "-w", "-t", str(int(wait_s)), "start"],
                         what="pg_ctl start", timeout=wait_s + 30)
        except BaseException:  # it may be up without having said so: not recorded yet, so stop it here
            with contextlib.suppress(Exception):
                subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                               cwd=folder, check=False, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
            raise
        pid = int((data / "postmaster.pid").read_text().split()[0])
        self.add({**service, "pid": pid, "started": start_ticks(pid)})
        service.update(pid=pid, started=start_ticks(pid))

    # -- Redis --

    def redis(self) -> dict[str, Any]:
        server = binary("redis-server", "/usr/bin/redis-server")
        folder = self.state / "redis"
        folder.mkdir(exist_ok=True)
        service = self.spawn(
            "redis", "redis", self.config.redis_port,
            [server, "--port", str(self.config.redis_port), "--bind", HOST, "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--daemonize", "no", "--protected-mode", "yes"],
            self.logs / "redis.log",
        )
        self.wait(service)
        return service

    # -- gateways --

    def shared_secret(self) -> str:
        """The gateways' URL signing secret: made once, kept with the cluster's state (mode 0600)."""
        path = self.state / "url-signing-secret"
        if not path.is_file():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def gateway_env(self) -> dict[str, str]:
        """A gateway's environment: ours, with the cluster's shared secret and artifact folder."""
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # What one instance signs (an artifact link, a sign-in's state) the other checks, and an
        # artifact one saves the other serves: one secret, one artifact folder for both.
        env.setdefault("ADK_GATEWAY_URL_SIGNING_SECRET", self.shared_secret())
        env.setdefault("ADK_GATEWAY_ARTIFACT_STORE", str(self.state / "artifacts"))
        return env

    def gateway(self, index: int, port: int, postgres_port: int, redis_port: int) -> dict[str, Any]:
        argv = [gateway_python(), "-m", "adk_gateway", "--host", HOST, "--port", str(port),
                "--session-store", f"postgresql://postgres@{HOST}:{postgres_port}/adk",
                "--stream-store", f"redis://{HOST}:{redis_port}/0"]
        return self.spawn(f"gateway-{index}", "gateway", port, argv, self.logs / f"gateway-{index}.log",
                          env=self.gateway_env())

    # -- nginx --

    def nginx(self) -> dict[str, Any]:
        nginx = binary("nginx", "/usr/sbin/nginx")
        folder = self.state / "nginx"
        folder.mkdir(exist_ok=True)
        folder.chmod(0o755)  # workers (nobody, when the master is root) use the temp folders here
        temp = folder
        worker = nginx_worker()
        if worker is not None:
            temp = self.folder_for(worker, "nginx", folder,
                                   f"nginx's workers run as `{worker.pw_name}`, which cannot enter {folder}")
        error_log = self.logs / "nginx-error.log"
        try:
            site = render_site_conf(SITE_CONF.read_text(), listen_port=self.config.port,
                                    upstreams=list(self.config.gateway_ports),
                                    access_log=self.logs / "nginx-access.log")
        except ValueError as exc:
            raise ClusterError(str(exc)) from None
        (folder / "adk-gateway.conf").write_text(site)
        temp_paths = "\n".join(f'    {kind}_temp_path "{temp}/{kind}";'
                               for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = folder / "nginx.conf"
        conf.write_text(f"""# Written by deploy/cluster.py (the site: deploy/nginx/adk-gateway.conf, rewritten).
daemon off;
worker_processes auto;
pid "{folder}/nginx.pid";
error_log "{error_log}" warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
{temp_paths}
    include "{folder}/adk-gateway.conf";
}}
""")
        argv = [nginx, "-p", str(folder), "-c", str(conf), "-e", str(error_log)]
        check = subprocess.run([nginx, "-t", *argv[1:]], check=False, capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise ClusterError(f"nginx rejected {shown(conf)}:\n{check.stderr.strip()}")
        return self.spawn("nginx", "nginx", self.config.port, argv, self.logs / "nginx.log")

    def up(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        for folder in (self.state.parent.parent, self.state.parent, self.state):
            folder.chmod(0o755)  # PostgreSQL (as postgres) and nginx's workers reach their folders
        self.logs.mkdir(mode=0o755, exist_ok=True)
        postgres = self.postgres()
        redis = self.redis()
        # The first gateway makes ADK's tables in a new database; two making them at once collide
        # (a unique violation in PostgreSQL's catalogue stops one), so the others start after it.
        ports = list(enumerate(self.config.gateway_ports, start=1))
        first = self.gateway(*ports[0], postgres["port"], redis["port"])
        self.wait(first)
        others = [self.gateway(i, port, postgres["port"], redis["port"]) for i, port in ports[1:]]
        nginx = self.nginx()
        for service in (*others, nginx):
            self.wait(service)

    def start_again(self, service: Mapping[str, Any]) -> None:
        """Starts a recorded piece that is not running (`start NAME`), as `up` started it."""
        kind = service["kind"]
        if kind == "postgres" and "options" in service:
            restarted = dict(service)
            self.start_postgres(restarted)
        elif kind != "postgres" and "argv" in service:
            env = self.gateway_env() if kind == "gateway" else None
            restarted = self.spawn(service["name"], kind, int(service["port"]), list(service["argv"]),
                                   Path(service["log"]), env=env, append=True)
        else:
            raise ClusterError(f"{service['name']} was started by an older deploy/cluster.py: run "
                               "`make cluster-down`, then `make cluster-up`")
        self.wait(restarted)


def postgres_run(prefix: list[str], folder: Path, log: Path, argv: list[str], *, what: str,
                 timeout: float) -> None:
    """Runs one of PostgreSQL's commands (as `postgres` when we are root) in its folder."""
    try:
        subprocess.run([*prefix, *argv], cwd=folder, check=True, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.CalledProcessError as exc:
        raise ClusterError(f"PostgreSQL: {what} failed: {(exc.stderr or exc.stdout).strip()}\n"
                           f"the end of {shown(log)}:\n{log_tail(log)}") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"PostgreSQL: {what} took more than {timeout:.0f} s; the end of "
                           f"{shown(log)}:\n{log_tail(log)}") from None


def postgres_stop(service: Mapping[str, Any], timeout_s: float) -> None:
    """`pg_ctl stop -m fast`: ends the sessions and writes a checkpoint (the caller then makes sure)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run([*service.get("as_postgres", []), str(Path(service["bin_dir"]) / "pg_ctl"),
                        "-D", str(service["data"]), "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"],
                       check=False, capture_output=True, timeout=timeout_s + 30, stdin=subprocess.DEVNULL, cwd="/")


def up(config: Config) -> int:
    existing = read_state(config)
    if existing and any(processes_of(s) for s in existing.get("services", [])):
        print(f"a cluster already runs on {config.url} ({shown(config.state)}):")
        if status_lines(existing):
            print(config.url)
            return 0
        raise ClusterError("part of it does not answer: run `make cluster-down`, then `make cluster-up`")
    busy = [p for p in (config.postgres_port, config.redis_port, *config.gateway_ports, config.port)
            if port_in_use(p)]
    if busy:
        raise ClusterError(f"port {', '.join(map(str, busy))} on {HOST} is in use; choose others with "
                           "CLUSTER_PORT (and CLUSTER_GATEWAY_PORTS, CLUSTER_POSTGRES_PORT, CLUSTER_REDIS_PORT)")
    if existing:  # a cluster that ended without `down` (a reboot): its runtime folder is of no use now
        remove_runtime(existing.get("runtime"))
    print(f"starting the cluster in {shown(config.state)} (logs in {shown(config.state / 'logs')})", flush=True)
    starter = Starter(config)
    try:
        starter.up()
    except BaseException:
        with contextlib.suppress(Exception):
            down_services(config, starter.record.get("services", []), quiet=True,
                          runtime=starter.record.get("runtime"))
        raise
    print(config.url)
    return 0


# --- one piece ----------------------------------------------------------------------------------


def recorded(config: Config, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster's state and the record of its piece `name`."""
    state = read_state(config)
    if state is None:
        raise ClusterError(f"no cluster on port {config.port} (start one with `make cluster-up`)")
    for service in state.get("services", []):
        if service["name"] == name:
            return state, service
    names = ", ".join(s["name"] for s in state.get("services", []))
    raise ClusterError(f"the cluster has no piece {name!r} (it has {names})")


def start_one(config: Config, name: str) -> int:
    """Starts one stopped piece again (after `stop NAME`, or a crash), as `up` started it."""
    state, service = recorded(config, name)
    if processes_of(service):
        print(f"{name} already runs (pid {service['pid']})")
        return 0
    Starter(config, record=state).start_again(service)
    return 0


def stop_one(config: Config, name: str) -> int:
    """Stops one piece (as `down` would) and keeps its record, so `start NAME` starts it again."""
    _state, service = recorded(config, name)
    if not processes_of(service):
        print(f"{name} is not running")
        return 0
    if service["kind"] == "postgres":
        postgres_stop(service, config.stop_timeout_s)
    stop_services([service], config.stop_timeout_s)
    if service["kind"] == "postgres":
        clear_stale_postmaster_pid(Path(service["data"]))
    print(f"stopped {name} (pid {service['pid']})")
    return 0


# --- down ---------------------------------------------------------------------------------------


def remove_runtime(runtime: str | None) -> None:
    """Deletes the cluster's runtime folder (only one that `Starter.runtime` made)."""
    if runtime and Path(runtime).name.startswith(RUNTIME_PREFIX):
        shutil.rmtree(runtime, ignore_errors=True)


def down_services(config: Config, services: list[Mapping[str, Any]], *, quiet: bool = False,
                  runtime: str | None = None) -> None:
    """Stops nginx, then the gateways, then Redis and PostgreSQL; removes cluster.json and the
    runtime folder."""
    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    by_kind = {kind: [s for s in services if s["kind"] == kind] for kind in ("nginx", "gateway", "redis", "postgres")}
    problems: list[str] = []
    for kind, group in by_kind.items():
        live = [s for s in group if processes_of(s)]
        if not live:
            continue
        if kind == "postgres":
            for service in live:  # a fast shutdown first: it ends the sessions and writes a checkpoint
                postgres_stop(service, config.stop_timeout_s)
        try:
            stop_services(live, config.stop_timeout_s)
        except ClusterError as exc:
            problems.append(str(exc))
        for service in live:
            if kind == "postgres":
                clear_stale_postmaster_pid(Path(service["data"]))
        say("stopped " + ", ".join(f"{s['name']} (pid {s['pid']})" for s in live))
    if problems:
        raise ClusterError("; ".join(problems))
    remove_runtime(runtime)
    with contextlib.suppress(FileNotFoundError):
        (config.state / STATE_FILE).unlink()


def down(config: Config) -> int:
    state = read_state(config)
    if state is None:
        print(f"no cluster on port {config.port} ({shown(config.state / STATE_FILE)} does not exist)")
        return 0
    down_services(config, state.get("services", []), runtime=state.get("runtime"))
    if state.get("runtime"):
        print(f"the cluster on {config.url} is down ({state['runtime']} deleted, with its database)")
    else:
        print(f"the cluster on {config.url} is down (data kept in {shown(config.state)})")
    return 0


# --- status -------------------------------------------------------------------------------------


def status_lines(state: Mapping[str, Any]) -> bool:
    """Prints one line per service; True when every one runs and answers."""
    healthy = True
    for service in state.get("services", []):
        processes = processes_of(service)
        ok, answer = answers(service) if processes else (False, "-")
        healthy = healthy and ok
        print(f"  {service['name']:<10} {HOST}:{service['port']:<6} pid {service['pid']:<8} "
              f"{'running' if processes else 'stopped'}  {'answers' if ok else 'DOES NOT ANSWER'} ({answer})  "
              f"log {shown(service['log'])}")
    return healthy


def status(config: Config) -> int:
    state = read_state(config)
    if state is None:
        print(f"no cluster on port {config.port} (start one with `make cluster-up`)")
        return 1
    print(f"cluster {config.url} ({shown(config.state)}):")
    return 0 if status_lines(state) else 1


# --- main ---------------------------------------------------------------------------------------


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="deploy/cluster.py",
        description="A local adk-gateway cluster (PostgreSQL, Redis, two gateways, nginx) on 127.0.0.1.",
        epilog="Settings come from the environment: CLUSTER_PORT (8088), CLUSTER_GATEWAY_PORTS, "
               "CLUSTER_POSTGRES_PORT, CLUSTER_REDIS_PORT, CLUSTER_START_TIMEOUT_S, CLUSTER_STOP_TIMEOUT_S, "
               "CLUSTER_RUNTIME_DIR; ADK_GATEWAY_* settings reach the gateways.",
    )
    parser.add_argument("command", choices=("up", "down", "status", "start", "stop"),
                        help="start/stop: one piece of a running cluster, by name (e.g. redis, gateway-1)")
    parser.add_argument("name", nargs="?", help="the piece, for start and stop")
    args = parser.parse_args(None if argv is None else list(argv))
    if (args.command in ("start", "stop")) != (args.name is not None):
        parser.error("start and stop take the name of one piece (postgres, redis, gateway-1, ..., nginx); "
                     "up, down and status take none")
    try:
        config = load_config(os.environ)
        if args.command == "start":
            return start_one(config, args.name)
        if args.command == "stop":
            return stop_one(config, args.name)
        return {"up": up, "down": down, "status": status}[args.command](config)
    except ClusterError as exc:
        print(f"cluster {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"cluster {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
