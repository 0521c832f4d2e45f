#!/usr/bin/env bash
# Builds libnmsparse and installs it under PREFIX (default /usr/local): lib/libnmsparse.{so,a},
# include/nmsparse.h and lib/pkgconfig/nmsparse.pc, so that
#   cc app.c $(pkg-config --cflags --libs nmsparse)
# works (with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system one).
set -euo pipefail
prefix=${1:-/usr/local}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release -p nmsparse-capi --lib
target=${CARGO_TARGET_DIR:-$root/target}/release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 644 "$target/libnmsparse.a" "$prefix/lib/"
install -m 755 "$target/libnmsparse.so" "$prefix/lib/"
install -m 644 include/nmsparse.h "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" capi/nmsparse.pc.in > "$prefix/lib/pkgconfig/nmsparse.pc"
echo "installed libnmsparse $version under $prefix"
