# Sourced by scripts that run a Go harness against Prometheus' own code
# (scripts/bench-xor, scripts/make-histogram-golden). Needs ROOT, say and
# die from the caller.
#
# prometheus_gopath <harness dir> <package name>: installs Debian's
# golang-go when go is missing, fetches Debian's orig tarball of
# prometheus 3.5.3+ds1 once into target/prometheus-go (checked against its
# SHA-256; PROMETHEUS_SRC=<dir> uses a source tree at hand instead), and
# sets GOPATH_DIR to a GOPATH holding that source under its import path and
# the harness's *.go files in src/<package name>: GOPATH mode builds the
# few packages tsdb/chunkenc imports from the tree, with no module
# downloads.

PROM_VERSION=3.5.3+ds1
PROM_TARBALL=prometheus_$PROM_VERSION.orig.tar.xz
PROM_SHA256=271a91b47e6ff9e507bf94e8c9eb76005ff24afd07a713bd1345a4b98e3add1c
PROM_URL=${PROM_URL:-http://deb.debian.org/debian/pool/main/p/prometheus/$PROM_TARBALL}

prometheus_gopath() {
  local harness=$1 pkg=$2 sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v go >/dev/null; then
    say "installing golang-go from Debian"
    $sudo apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends golang-go >&2
  fi
  command -v go >/dev/null || die "go is missing"

  local cache=$ROOT/target/prometheus-go
  mkdir -p "$cache"
  if [ -n "${PROMETHEUS_SRC:-}" ]; then
    SRC=$PROMETHEUS_SRC
  else
    SRC=$cache/prometheus-src
    if [ ! -f "$SRC/tsdb/chunkenc/xor.go" ]; then
      say "fetching Prometheus' source ($PROM_TARBALL) from Debian"
      curl -fsS -o "$cache/$PROM_TARBALL" "$PROM_URL" ||
        die "could not fetch $PROM_URL (set PROMETHEUS_SRC to a Prometheus source tree)"
      echo "$PROM_SHA256  $cache/$PROM_TARBALL" | sha256sum -c --quiet - ||
        die "$PROM_TARBALL does not have the expected SHA-256"
      rm -rf "$SRC" "$cache/unpack" && mkdir -p "$cache/unpack"
      tar -xf "$cache/$PROM_TARBALL" -C "$cache/unpack"
      mv "$cache/unpack"/prometheus-* "$SRC"
      rm -rf "$cache/unpack"
    fi
  fi
  [ -f "$SRC/tsdb/chunkenc/xor.go" ] || die "$SRC is not a Prometheus source tree"

  GOPATH_DIR=$cache/gopath-$pkg
  rm -rf "$GOPATH_DIR" && mkdir -p "$GOPATH_DIR/src/github.com/prometheus" "$GOPATH_DIR/src/$pkg"
  ln -s "$SRC" "$GOPATH_DIR/src/github.com/prometheus/prometheus"
  cp "$harness"/*.go "$GOPATH_DIR/src/$pkg/"
  if ! go list std | grep -qx slices; then
    # model/histogram uses slices.Equal, in the standard library since Go
    # 1.21; Debian 12's Go is 1.19.
    mkdir -p "$GOPATH_DIR/src/slices"
    cat >"$GOPATH_DIR/src/slices/slices.go" <<'GO'
package slices

func Equal[S ~[]E, E comparable](a, b S) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
GO
  fi
}
