# Sourced by run.sh and adpsgd.sh on a lent GPU machine: its image's PyTorch, our package from this checkout,
# the pure wheels the image lacks (carried in .whl), and ../shared/data's LDC93S1 and yesno (carried in
# .gpudata/shared).
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
[ -e ../shared ] || ln -s "$PWD/.gpudata/shared" ../shared
