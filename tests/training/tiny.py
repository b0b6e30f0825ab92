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
