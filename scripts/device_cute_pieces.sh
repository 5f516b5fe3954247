#!/usr/bin/env bash
# Splits the CuTe DSL parts made by ../shared/device/pack-cute into pieces small enough to travel
# one per device call beside this repository's tracked tree (which is itself ~54 MB of the 64 MiB
# a call may carry), and writes .device/bin/join.sh, which the GPU machine sources in each call:
# it keeps the piece that call carried in /opt/cute/pieces and unpacks a part once all its pieces
# are there (then sources pack-cute's env.sh). Ignored paths only (.device/ is in .git/info/exclude).
#   bash ../shared/device/pack-cute && bash scripts/device_cute_pieces.sh [PIECE_BYTES]
# (PIECE_BYTES: by default the room the tracked tree leaves in a call)
# then one call per piece, back to back (a machine goes cold after 30 s idle):
#   carry [".device/cute-a1", ".device/bin"], command `source .device/bin/join.sh`, ... a2 .. aN,
#   b1 .. bM; the call with the last piece prints "[device] CuTe DSL ready".
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
# default piece size: what a call may carry (64 MiB) less the tracked tree and 1 MiB for
# .device/bin and untracked files, so the pieces keep fitting as the tree grows
tree=$(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c)
size=${1:-$(( 67108864 - tree - 1048576 ))}
[ "$size" -gt 1000000 ] || { echo "the tracked tree ($tree bytes) leaves no room for a piece" >&2; exit 1; }
for p in a b; do
  [ -s ".device/cute-$p/part.tar.xz" ] || { echo "no .device/cute-$p/part.tar.xz: run ../shared/device/pack-cute first" >&2; exit 1; }
  rm -rf .device/cute-"$p"[0-9]*
  tmp=$(mktemp -d)
  split -b "$size" -d -a 2 ".device/cute-$p/part.tar.xz" "$tmp/piece"
  i=0
  for f in "$tmp"/piece*; do
    i=$((i + 1)); mkdir -p ".device/cute-$p$i"; mv "$f" ".device/cute-$p$i/piece"
  done
  rmdir "$tmp"
  eval "n_$p=$i"
  cat .device/cute-"$p"[0-9]*/piece | cmp -s - ".device/cute-$p/part.tar.xz" || { echo "pieces of $p do not rejoin" >&2; exit 1; }
done
cat > .device/bin/join.sh <<JOIN
# Source on the GPU machine (written by scripts/device_cute_pieces.sh): keeps the CuTe DSL piece
# this call carried, unpacks a part once all its pieces are here, then sources env.sh.
_cute=/opt/cute/site; mkdir -p "\$_cute" /opt/cute/pieces
for _d in .device/cute-[ab][0-9]*; do [ -f "\$_d/piece" ] && cp "\$_d/piece" "/opt/cute/pieces/\${_d#.device/cute-}"; done
for _p in a b; do
  _n=\$([ \$_p = a ] && echo $n_a || echo $n_b)
  if [ ! -f "\$_cute/.part-\$_p" ]; then
    _have=\$(ls /opt/cute/pieces/\$_p[0-9]* 2>/dev/null | wc -l)
    echo "[join] part \$_p: \$_have of \$_n pieces here"
    if [ "\$_have" = "\$_n" ]; then
      cat \$(for i in \$(seq 1 \$_n); do echo /opt/cute/pieces/\$_p\$i; done) | tar xJf - -C "\$_cute" && touch "\$_cute/.part-\$_p"
    fi
  fi
done
source .device/bin/env.sh
JOIN
echo "pieces: a1..a$n_a, b1..b$n_b (at most $size bytes each); .device/bin/join.sh written"
