# Sourced by the profile scripts: where the samples of a folded profile (inferno-collapse-perf)
# are, for the notes.
#
#   summarize FOLDED FUNCTIONS   by process (the first frame is the command), then the
#                                FUNCTIONS functions with the most samples of their own

summarize() {
  local folded=$1 functions=$2
  echo "-- by process"
  awk '{ n = $NF; split($1, f, ";"); t[f[1]] += n; all += n }
       END { for (k in t) printf "%6.1f%%  %s\n", 100 * t[k] / all, k }' "$folded" |
    sort -rn | head -8 || true
  echo "-- by function (self)"
  awk '{ n = $NF; $NF = ""; sub(/ +$/, ""); k = split($0, f, ";"); t[f[k]] += n; all += n }
       END { for (k in t) printf "%6.1f%%  %s\n", 100 * t[k] / all, k }' "$folded" |
    sort -rn | head -"$functions" || true
}
