"""A private docker engine for the docker-backend tests (and the sandbox benchmark).

`LocalDockerd` starts Debian's `dockerd` with its own data root, exec root, socket and pid file under one
fresh /tmp directory, without a bridge and without touching iptables (no traffic can be routed anywhere;
containers only get network "none" or "host"), and stops it afterwards. The `docker_engine` fixture
(session-scoped) points DOCKER_HOST at it and builds the sandbox image. If dockerd cannot start, the
tests FAIL with the reason — a sandbox test that silently skips proves nothing.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0


class DockerdError(Exception):
    """dockerd could not be started (the message says why, with the tail of its log)."""


@dataclass
class LocalDockerd:
    """One dockerd we start and own: `start()`, `host` (a DOCKER_HOST value), `stop()`."""

    root: Path | None = None
    proc: subprocess.Popen | None = None

    @property
    def socket_path(self) -> Path:
        assert self.root is not None
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "dockerd.log"

    def start(self) -> "LocalDockerd":
        dockerd = shutil.which("dockerd", path="/usr/sbin:/usr/bin:/sbin:/bin")
        if dockerd is None:
            raise DockerdError("dockerd is not installed (Debian package docker.io)")
        if os.geteuid() != 0:
            raise DockerdError("dockerd needs root to start (the docker-backend tests run as root)")
        self.root = Path(tempfile.mkdtemp(prefix="goclaw-dockerd-", dir="/tmp"))
        config = self.root / "daemon.json"
        config.write_text("{}\n")  # never the machine's /etc/docker/daemon.json (mirrors, bridges, ...)
        namespace = f"goclaw-test-{uuid.uuid4().hex[:12]}"
        argv = [
            dockerd, "--config-file", str(config),
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--host", self.host, "--pidfile", str(self.root / "dockerd.pid"),
            "--containerd-namespace", namespace, "--containerd-plugins-namespace", f"{namespace}-plugins",
            "--log-level", "warn",
        ]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise DockerdError(f"dockerd exited with status {self.proc.returncode}: {self.log_tail()}")
            if self.socket_path.exists() and self._answers():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise DockerdError(f"dockerd did not answer within {START_TIMEOUT_SECONDS:.0f}s: {self.log_tail()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        import docker

        try:
            client = docker.APIClient(base_url=self.host, timeout=2, version="auto")
        except Exception:
            return False
        try:
            return bool(client.ping())
        except Exception:
            return False
        finally:
            client.close()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (dockerd stops its containers and its containerd), SIGKILL to our group as a last resort."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the session dockerd leads (it and its containerd)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        if self.root is not None and self.root.exists():
            umount = shutil.which("umount", path="/usr/bin:/bin:/usr/sbin:/sbin")
            for mount in sorted(_mounts_under(self.root), key=len, reverse=True):  # e.g. exec/netns/default
                if umount:
                    subprocess.run([umount, "-l", mount], capture_output=True, timeout=30)
            if not _mounts_under(self.root):  # never delete through a mount (it could bind a real directory)
                shutil.rmtree(self.root, ignore_errors=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            return [line.split()[4] for line in fh if line.split()[4].startswith(prefix)]
    except OSError:
        return [str(root)]  # unknown: treat as mounted, keep the directory


@dataclass
class DockerEngine:
    """What the fixture hands to tests: the engine address, an SDK client, the built image."""

    host: str
    client: Any
    image: Any  # sandbox_app.docker_image.SandboxImageBuild
    dockerd: LocalDockerd


@pytest.fixture(scope="session")
def docker_engine():
    """A private dockerd for this test session, DOCKER_HOST pointing at it, the sandbox image built."""
    dockerd = LocalDockerd()
    try:
        dockerd.start()
    except DockerdError as exc:
        pytest.fail(f"the docker-backend tests need a running dockerd and could not start one: {exc}",
                    pytrace=False)
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("DOCKER_HOST", dockerd.host)
        mp.delenv("DOCKER_TLS_VERIFY", raising=False)
        mp.delenv("DOCKER_CERT_PATH", raising=False)
        mp.delenv("DOCKER_CONTEXT", raising=False)
        from sandbox_app.backends.docker import engine_client
        from sandbox_app.docker_image import sandbox_image_build

        client = engine_client()
        try:
            image = sandbox_image_build(client=client)
        except Exception as exc:
            pytest.fail(f"could not build the docker sandbox image: {exc}", pytrace=False)
        yield DockerEngine(host=dockerd.host, client=client, image=image, dockerd=dockerd)
        client.close()
    finally:
        mp.undo()
        dockerd.stop()
