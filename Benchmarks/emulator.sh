# Sourced by Benchmarks/profile-agent and Benchmarks/hot-functions (POSIX sh): a temporary
# directory $TMP, removed on exit with the agent ($AGENT) and emulator ($EMU) still running,
# and `start_emulator`, which starts $BIN/pushwoosh-emulator on a free loopback port with the
# example app and sets $EMU and $PORT.
TMP=$(mktemp -d /tmp/pw-bench.XXXXXX)
cleanup() {
    [ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null || true
    [ -n "${EMU:-}" ] && kill "$EMU" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

start_emulator() {
    "$BIN/pushwoosh-emulator" --listen 127.0.0.1:0 --apps config/flags.example.json >"$TMP/emu.out" 2>"$TMP/emu.err" &
    EMU=$!
    i=0
    until grep -q '^listening on ' "$TMP/emu.out" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 200 ] || { cat "$TMP/emu.err" >&2; exit 1; }
        sleep 0.05
    done
    PORT=$(sed -n 's/^listening on 127.0.0.1://p' "$TMP/emu.out")
}
