set -e
CK=${CK:?a checkpoint both commits read (trained by the older one)}
for round in 1 2; do
  for side in before after; do
    if [ $side = before ]; then SRC=$BEFORE/src; else SRC=$AFTER/src; fi
    PYTHONPATH=$SRC $AFTER/.venv/bin/python -m speechscale.cli -q bench serve --checkpoint $CK --seconds 5 --concurrency 1,8,32 --requests 64 | sed "s/^/{\"side\": \"$side\", \"round\": $round, \"row\": /; s/$/}/"
  done
done
