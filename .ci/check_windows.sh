#!/usr/bin/env bash
# The kernels on Windows (issue 28), cross-compiled here with MinGW-w64 (GCC for Windows, its
# posix thread model): csrc/check_kernels.cpp with the kernel headers, the thread pool threaded
# (std::thread; no pthread_atfork on Windows), the x86 level read from CPUID/XGETBV by the
# kernels' own code (no compiler built-in), memory.hpp's _aligned_malloc. Then run under Wine:
# every x86 level the CPU has against the portable level's bits (--quick: the sizes that reach
# every code path, as .ci/check_aarch64.sh under qemu), and it fails unless the pool is threaded
# and the level it selects (CPUID/XGETBV under Windows) is the one Linux's /proc/cpuinfo names.
# Not checked here: MSVC (the compiler of Windows wheels) and a real Windows; docs/platforms.md.
# Needs g++-mingw-w64-x86-64 and wine64 (about 100 MB; installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
cxx=x86_64-w64-mingw32-g++-posix
wine=/usr/lib/wine/wine64
need=()
command -v "$cxx" >/dev/null || need+=(g++-mingw-w64-x86-64)
[ -x "$wine" ] || need+=(wine64)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
        >/dev/null
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# -static: no MinGW DLLs to find at run time (libstdc++, winpthread)
"$cxx" -std=c++17 -O3 -ffp-contract=off -fno-math-errno -fno-trapping-math -Wall -Wextra -Icsrc \
    csrc/check_kernels.cpp -o "$out/check_kernels.exe" -static
echo "-- built $(file -b "$out/check_kernels.exe" 2>/dev/null || echo check_kernels.exe)"
export WINEPREFIX="$out/wine" WINEDEBUG=-all
# the level this CPU should select, from Linux's own reading of CPUID
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
if has avx512f avx512dq avx512_bf16; then level=avx512-bf16
elif has avx512f; then level=avx512
elif has avx2 fma f16c; then level=avx2
else level=portable; fi
"$wine" "$out/check_kernels.exe" --quick --expect "$level" 2>&1 | grep -v '^wine: ' \
    | tee "$out/log"
grep -q " failures;" "$out/log" || { echo "the Windows build did not finish"; exit 1; }
grep -q " 0 failures;" "$out/log" || exit 1
grep -q "threads: pool" "$out/log" || { echo "the Windows build is not threaded"; exit 1; }
echo "check_windows: $((SECONDS - start)) s"
