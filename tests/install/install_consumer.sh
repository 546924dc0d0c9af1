#!/usr/bin/env bash
# Installs this build into a fresh prefix as a user would (cmake --install), then builds a small
# project against it with find_package(hardy CONFIG), once enabling only CXX and once C and CXX,
# and reads, with hardy::checkpoint, a checkpoint the installed hardy wrote: the printed step must
# be the checkpoint's. Also checks the
# pkg-config file, the report helper and the bash completion that the install puts in place.
# Usage: install_consumer.sh BUILD_DIR SOURCE_DIR [CMAKE_ARGS...] (the consumer's configure flags)
set -euo pipefail
build=$1 source=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
prefix=$tmp/prefix
for file in bin/hardy lib/cmake/hardy/hardyConfig.cmake lib/cmake/hardy/hardyTargets.cmake \
            lib/pkgconfig/hardy.pc include/hardy/checkpoint/checkpoint_file.hpp \
            share/hardy/tools/report.py share/bash-completion/completions/hardy; do
  [ -e "$prefix/$file" ] || fail "the install has no $file"
done
grep -q -- '--global-batch' "$prefix/share/bash-completion/completions/hardy" \
  || fail "the installed completion lacks hardy train's --global-batch"
echo "ok: installed into $prefix"

# A checkpoint at step 3, written by the installed hardy (a tiny job: seconds).
"$prefix/bin/hardy" train --run-dir "$tmp/run" --synthetic --samples 16 --height 16 --width 16 \
  --eval-samples 0 --global-batch 2 --steps 3 --checkpoint-every 3 --model-width 4 \
  --aspp-channels 8 --decoder-channels 8 --low-level-channels 4 --groups 2 --threads 1 \
  >"$tmp/train.log" 2>&1 || { tail "$tmp/train.log"; fail "hardy train"; }
checkpoint=$tmp/run/checkpoints/ckpt-3.h5
[ -f "$checkpoint" ] || { ls -R "$tmp/run"; fail "no $checkpoint"; }

# hardy report from the install: its helper comes from PREFIX/share/hardy/tools, not the checkout.
"$prefix/bin/hardy" report "$tmp/run" --out "$tmp/run.svg" >/dev/null || fail "the installed hardy report"
grep -q "ckpt 3" "$tmp/run.svg" || fail "the installed hardy report did not mark the checkpoint at step 3"
echo "ok: the installed hardy report drew $tmp/run.svg"

# The same project as most C++ projects declare it (CXX only: no FindHDF5, which needs C) and
# with C enabled too.
for languages in "CXX" "C;CXX"; do
  consumer=$tmp/consumer-${languages/;/-}
  cmake -S "$source/tests/install/consumer" -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release -DHARDY_CONSUMER_LANGUAGES="$languages" "$@" >"$consumer.configure.log" 2>&1 \
    || { cat "$consumer.configure.log"; fail "configuring a $languages consumer with find_package(hardy CONFIG)"; }
  if [ "$languages" = "CXX" ] && compgen -G "$consumer/CMakeFiles/*/CMakeCCompiler.cmake" >/dev/null; then
    fail "the CXX-only consumer enabled C"
  fi
  cmake --build "$consumer" >"$consumer.build.log" 2>&1 \
    || { cat "$consumer.build.log"; fail "building the $languages consumer"; }
  output=$("$consumer/checkpoint_step" "$checkpoint")
  [ "$output" = "step 3" ] || fail "the $languages consumer printed '$output', want 'step 3'"
  echo "ok: a find_package(hardy) consumer with languages $languages read $checkpoint: $output"
done

# pkg-config: found in the install's own directory, with its dependencies.
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs hardy) \
    || fail "pkg-config hardy"
  [[ $flags == *"-I$prefix/lib/pkgconfig/../../include"* && $flags == *-lhardy_checkpoint* ]] \
    || fail "pkg-config hardy gave '$flags'"
  echo "ok: pkg-config hardy: $flags"
  # Plain words only (no quoted define that needs a shell's eval): used as a Makefile or a script
  # would use them.
  [[ $flags != *[\"\'\\]* ]] || fail "pkg-config hardy's flags need shell quoting: '$flags'"
  # The same consumer built outside CMake, with the MPI compiler hardy was built with.
  if [ -n "${HARDY_MPICXX:-}" ]; then
    # shellcheck disable=SC2086  # split into words, as make splits $(shell pkg-config ...)
    "$HARDY_MPICXX" -std=c++20 -O1 "$source/tests/install/consumer/main.cpp" -o "$tmp/pc_consumer" $flags \
      || fail "compiling the consumer with pkg-config hardy's flags"
    output=$("$tmp/pc_consumer" "$checkpoint")
    [ "$output" = "step 3" ] || fail "the pkg-config consumer printed '$output', want 'step 3'"
    echo "ok: a pkg-config consumer read it too: $output"
  fi
fi
