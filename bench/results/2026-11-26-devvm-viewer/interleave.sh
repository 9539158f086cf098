#!/bin/bash
# Interleaved runs of two viewer_bench builds on one trace: interleave.sh BEFORE AFTER TRACE [ORDER]
# (ORDER "reversed" runs AFTER first in each pair). The trace: viewer_bench --write TRACE.
before=$1 after=$2 trace=$3
order="before after"
[ "$4" = reversed ] && order="after before"
for i in 1 2 3; do
  for v in $order; do
    bin=$before; [ $v = after ] && bin=$after
    echo "=== $v run $i $(cat /proc/loadavg)"
    xvfb-run -a -s "-screen 0 1920x1080x24 -noreset" "$bin" --no-baseline --reps 3 --frames 60 --trace "$trace"
  done
done
