"""The tiny LDC93S1 run several training tests build: a narrow ds2-tiny on one utterance, stopped by steps."""
from speechscale.recipe import load_recipe
from tests.conftest import shared

NARROW = "{conv: [{channels: 8, kernel: [11, 11], stride: [2, 2]}], rnn_hidden: 32, rnn_layers: 1, dropout: 0.0}"


def ldc_config(out, *extra):
    """The run's config (trainer.out_dir=`out`, then the `extra` overrides); set trainer.max_steps."""
    m = shared("ldc93s1", "manifest.jsonl")
    return load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                              "trainer.progress=false", "optim.lr=0.003", "features.sample_rate=8000",
                              f"model.overrides={NARROW}", "trainer.max_epochs=0", *extra])


def george_run(out, *extra):
    """Two epochs of a narrow ds2-tiny on FSDD's george (test split), validated on jackson, with speed perturbation,
    SGD and sample traces; then the `extra` overrides. Returns (summary, each step's utterance ids, trainer)."""
    import json

    from speechscale.training.trainer import Trainer

    m = shared("fsdd", "manifest.jsonl")
    cfg = load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                             "data.filter={speaker: george, split: test}", "data.val_filter={speaker: jackson, "
                             "split: test}", "data.batch_seconds=4", "data.max_batch_size=12", "features.sample_rate=8000",
                             "augment.speed=[0.9, 1.1]", "trainer.max_epochs=2", "trainer.progress=false",
                             "trainer.trace_samples=true", "optim.name=sgd", "optim.lr=0.01", "optim.warmup_steps=0",
                             f"model.overrides={NARROW}", *extra])
    trainer = Trainer(cfg)
    summary = trainer.fit()
    trace = [json.loads(x)["ids"] for x in (out / "samples-rank0.jsonl").read_text().splitlines()]
    return summary, trace, trainer
