"""The offline parts of `python -m models.fetch`: arguments, URLs and safe tar extraction."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from models import fetch
from models.fetch import (
    FetchError,
    bos_url,
    build_parser,
    fetch_model,
    huggingface_urls,
    install_from_tar,
    safe_extract_tar,
)

pytestmark = pytest.mark.unit

MODEL_FILES = {
    "inference.json": b"{}",
    "inference.pdiparams": b"\0\1",
    "inference.yml": b"Global:\n  model_name: PP-OCRv5_mobile_det\n",
}


def make_tar(path: Path, members: dict[str, bytes], *, links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def model_tar(path: Path, top: str = "PP-OCRv5_mobile_det_infer") -> Path:
    return make_tar(path, {f"{top}/{name}": data for name, data in MODEL_FILES.items()})


def test_parse_arguments(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["PP-OCRv5_server_det", "PP-OCRv5_server_rec", "--dest", str(tmp_path)]
    )
    assert args.names == ["PP-OCRv5_server_det", "PP-OCRv5_server_rec"]
    assert args.dest == tmp_path
    assert args.source == "bos"
    assert not args.force
    args = build_parser().parse_args(
        ["PP-LCNet_x1_0_textline_ori", "--dest", "m", "--source", "huggingface", "--force"]
    )
    assert args.source == "huggingface"
    assert args.force


@pytest.mark.parametrize(
    "argv",
    [
        ["PP-OCRv5_server_det"],  # --dest is required
        ["--dest", "m"],  # at least one name
        ["no_such_model", "--dest", "m"],
        ["PP-OCRv5_server_det", "--dest", "m", "--source", "ftp"],
    ],
)
def test_bad_arguments_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    capsys.readouterr()


def test_bos_url() -> None:
    assert bos_url("PP-OCRv5_mobile_det") == (
        "https://paddle-model-ecology.bj.bcebos.com/paddlex/official_inference_model/"
        "paddle3.0.0/PP-OCRv5_mobile_det_infer.tar"
    )


def test_huggingface_urls() -> None:
    urls = huggingface_urls("PP-OCRv6_medium_rec")
    assert urls["inference.yml"] == (
        "https://huggingface.co/PaddlePaddle/PP-OCRv6_medium_rec/resolve/main/inference.yml"
    )
    assert set(urls) == {"inference.json", "inference.pdiparams", "inference.yml"}
    mirror = huggingface_urls("PP-OCRv5_server_det", "https://hf-mirror.example/")
    assert mirror["inference.json"].startswith("https://hf-mirror.example/PaddlePaddle/")


def test_safe_extract_of_a_model_tar(tmp_path: Path) -> None:
    archive = model_tar(tmp_path / "m.tar")
    dest = tmp_path / "models"
    dest.mkdir()
    target = install_from_tar(archive, dest, "PP-OCRv5_mobile_det")
    assert target == dest / "PP-OCRv5_mobile_det"
    assert (target / "inference.yml").read_bytes() == MODEL_FILES["inference.yml"]
    assert sorted(p.name for p in dest.iterdir()) == ["PP-OCRv5_mobile_det"]  # no leftovers


@pytest.mark.parametrize(
    "member",
    ["../evil.txt", "ok/../../evil.txt", "/etc/evil.txt"],
)
def test_unsafe_paths_are_rejected(tmp_path: Path, member: str) -> None:
    archive = make_tar(tmp_path / "bad.tar", {member: b"x"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FetchError, match=r"absolute|escapes"):
        safe_extract_tar(archive, out)
    assert list(out.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()


def test_links_are_rejected(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "link.tar", {"m/inference.yml": b""}, links={"m/x": "/etc"})
    with pytest.raises(FetchError, match="link"):
        safe_extract_tar(archive, tmp_path)


def test_not_a_tar(tmp_path: Path) -> None:
    archive = tmp_path / "junk.tar"
    archive.write_bytes(b"<html>404</html>")
    with pytest.raises(FetchError, match="not a readable tar"):
        safe_extract_tar(archive, tmp_path)


def test_tar_without_inference_yml(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "m.tar", {"m_infer/inference.pdiparams": b"\0"})
    dest = tmp_path / "models"
    dest.mkdir()
    with pytest.raises(FetchError, match=r"inference\.yml"):
        install_from_tar(archive, dest, "m")
    assert list(dest.iterdir()) == []


def test_fetch_model_from_bos_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source_tar = model_tar(tmp_path / "served.tar")
    requested: list[str] = []

    def fake_download(url: str, target: Path, timeout_s: float = 60.0) -> None:
        requested.append(url)
        target.write_bytes(source_tar.read_bytes())

    monkeypatch.setattr(fetch, "download", fake_download)
    dest = tmp_path / "models"
    path = fetch_model("PP-OCRv5_mobile_det", dest)
    assert requested == [bos_url("PP-OCRv5_mobile_det")]
    assert (path / "inference.json").is_file()
    # A second fetch keeps what is there; --force replaces it.
    assert fetch_model("PP-OCRv5_mobile_det", dest) == path
    assert len(requested) == 1
    fetch_model("PP-OCRv5_mobile_det", dest, force=True)
    assert len(requested) == 2
    assert sorted(p.name for p in dest.iterdir()) == ["PP-OCRv5_mobile_det"]


def test_fetch_model_from_huggingface_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_download(url: str, target: Path, timeout_s: float = 60.0) -> None:
        target.write_bytes(MODEL_FILES[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(fetch, "download", fake_download)
    path = fetch_model("PP-LCNet_x1_0_textline_ori", tmp_path, source="huggingface")
    assert sorted(p.name for p in path.iterdir()) == sorted(MODEL_FILES)


def test_main_reports_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing_download(url: str, target: Path, timeout_s: float = 60.0) -> None:
        raise FetchError(f"cannot download {url}: no network")

    monkeypatch.setattr(fetch, "download", failing_download)
    assert fetch.main(["PP-OCRv5_server_rec", "--dest", str(tmp_path)]) == 1
    assert "no network" in capsys.readouterr().err


def test_download_streams_a_local_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "blob.bin"
    source.write_bytes(bytes(range(256)) * 8192)
    target = tmp_path / "copy.bin"
    fetch.download(source.as_uri(), target)
    assert target.read_bytes() == source.read_bytes()
    assert not (tmp_path / "copy.bin.part").exists()
    with pytest.raises(FetchError, match="cannot download"):
        fetch.download((tmp_path / "missing.bin").as_uri(), tmp_path / "x.bin")
    assert not (tmp_path / "x.bin.part").exists()
    capsys.readouterr()
