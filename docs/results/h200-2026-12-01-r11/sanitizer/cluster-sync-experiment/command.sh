R=/tmp/e; mkdir -p $R; bash scripts/gpu_session.sh build > $R/b1.txt 2>&1
ROWS=cuda:softmax,cuda:softmax_block,cuda:softmax_online,cuda:softmax_persist,cuda:softmax_rows,cuda:softmax_simple,cuda:softmax_warp,cuda:vector_add,cuda:vector_add_simple
S="compute-sanitizer --error-exitcode 1 --tool"
(timeout 290 $S synccheck python3 scripts/tune_cuda.py --sanitize --only $ROWS > $R/sync_rows.txt 2>&1; echo "sync_rows $?" >> $R/ex.txt) &
(timeout 290 $S racecheck python3 scripts/tune_cuda.py --sanitize --only $ROWS > $R/race_rows.txt 2>&1; echo "race_rows $?" >> $R/ex.txt) &
timeout 90 $S synccheck python3 scripts/tune_cuda.py --sanitize --only cuda:softmax_cluster > $R/sync_cluster_before.txt 2>&1; echo "sync_cluster_before $?" >> $R/ex.txt
# exp_cluster_sync.patch is kept beside this script (it was carried in the repository root)
patch -p1 < exp_cluster_sync.patch > $R/patch.txt 2>&1; bash scripts/gpu_session.sh build > $R/b2.txt 2>&1
(timeout 150 $S racecheck python3 scripts/tune_cuda.py --sanitize --only cuda:softmax_cluster > $R/race_cluster_after.txt 2>&1; echo "race_cluster_after $?" >> $R/ex.txt) &
timeout 90 $S synccheck python3 scripts/tune_cuda.py --sanitize --only cuda:softmax_cluster > $R/sync_cluster_after.txt 2>&1; echo "sync_cluster_after $?" >> $R/ex.txt
wait; tar czf $OUT/e.tgz -C /tmp e; cat $R/ex.txt; for f in $R/*_*.txt; do echo "== $f $(grep -cE ': PASS' $f) pass $(grep -cE ': FAIL' $f) fail | $(grep -E 'SUMMARY' $f | tail -1)"; done
