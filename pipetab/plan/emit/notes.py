"""What an emitted configuration says beside its settings: where it differs from the plan
(a substitution or an approximation, refused by ``--no-substitute``) and what it assumes
(information only). Both are one line each, in the emitted text and on stderr."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Notes:
    """The lines an emitter collects: ``differs`` (what runs is not what was planned) and
    ``assumes`` (what the plan does not decide and the emitter chose)."""

    differs: list[str] = field(default_factory=list)
    assumes: list[str] = field(default_factory=list)

    def differ(self, line: str) -> None:
        self.differs.append(line)

    def assume(self, line: str) -> None:
        self.assumes.append(line)

    def comments(self) -> list[str]:
        """The lines as the emitted text's comments."""
        return [f"# DIFFERS FROM THE PLAN: {line}" for line in self.differs] + \
            [f"# assumes: {line}" for line in self.assumes]


def sizes_of(conf, gpus: int) -> dict:
    """The planned parallel sizes and batch of ``conf`` on ``gpus`` GPUs."""
    s = conf.shape
    return {"pp": s.stages, "tp": s.tp, "cp": s.cp, "dp": gpus // (s.stages * s.tp * s.cp), "ep": s.ep,
            "etp": s.etp, "microbatch_size": s.sizes.microbatch_size, "global_batch": s.sizes.global_batch,
            "seq_len": s.sizes.seq_len}


def modules_word(modules) -> str:
    """Recompute modules in the round trip's words: ``"modules:a,b"`` in pipetab's order."""
    from pipetab.hardware.context import recompute_modules_of

    return "modules:" + ",".join(recompute_modules_of(tuple(modules)))


def dropped(conf, model=None) -> tuple[str, ...]:
    """The modules ``conf`` recomputes, as ``hardware.activations.dropped_modules`` counts
    them: its recompute modules, and ``core_attn`` with selective recomputation of classic
    attention (assumed when ``model`` is not given)."""
    from pipetab.hardware.context import Recompute, recompute_modules_of

    s = conf.shape
    classic = model is None or model.attention == "classic"
    extra = ("core_attn",) if s.recompute is Recompute.SELECTIVE and classic else ()
    return recompute_modules_of((*s.recompute_modules, *extra))


def planned_recompute(conf, layers: tuple[int, ...], model=None) -> object:
    """The plan's recomputation in the round trip's words: ``"none"``, ``"selective"``,
    ``modules_word`` of the modules it drops (``dropped``) or the layers recomputed in
    full on each stage of the pipeline (``layers``: per stage)."""
    from pipetab.hardware.context import Recompute

    s = conf.shape
    if s.recompute_modules and s.recompute_layers is None and s.recompute is not Recompute.FULL:
        return modules_word(dropped(conf, model))
    if not layers:  # one stage, no layout: what each stage holds is the whole model
        if s.recompute_layers is not None:
            return tuple(s.recompute_layers) if max(s.recompute_layers) else "none"
        return "full" if s.recompute is Recompute.FULL else str(s.recompute)
    if s.recompute_layers is not None:
        counts = list(s.recompute_layers)
        if len(counts) < len(layers):  # one count per device: each virtual stage of it
            counts = [counts[i % len(counts)] for i in range(len(layers))]
        return tuple(min(n, k) for n, k in zip(counts, layers))
    if s.recompute is Recompute.FULL:
        return tuple(layers)
    return str(s.recompute)
