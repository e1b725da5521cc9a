#!/usr/bin/env bash
# The kernels on aarch64 (issue 28): csrc/check_kernels.cpp includes the kernel headers directly
# (no Python under emulation) and compares every kernel at every SIMD level this CPU runs with
# the portable level's results in the same process, bit for bit (NaN where NaN): every op
# (apply_rope, apply_rope_cached, the sinusoid and RoPE tables, the streaming copy), storage type
# (f32, f64, f16, bf16, 16-bit x against f32 tables), layout, partial rotary, in place, odd sizes,
# misaligned starts, one and two threads, every 16-bit pattern through each level's conversions.
# Cross-compiled for aarch64 and run under qemu-aarch64: portable and NEON, and it fails unless
# NEON is the level the (emulated) CPU selects. --quick: the sizes that reach every code path
# (emulation is ~50x slower). The x86 levels run the same driver in .ci/check_windows.sh and
# tests/test_simd_levels.py (a native build here would double this check's time).
# Fails on any difference. Needs g++-aarch64-linux-gnu and qemu-user (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
        >/dev/null
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# the flags of setup.py (-O3: the portable level as the compiler vectorises it)
flags=(-std=c++17 -O3 -ffp-contract=off -fno-math-errno -fno-trapping-math -pthread -Wall -Wextra -Icsrc)
aarch64-linux-gnu-g++ "${flags[@]}" csrc/check_kernels.cpp -o "$out/check_aarch64"
echo "-- aarch64 under qemu"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/check_aarch64" --quick --expect neon
echo "check_aarch64: $((SECONDS - start)) s"
