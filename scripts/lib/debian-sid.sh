# Sourced by the scripts that take Go binaries from Debian's sid pool
# (scripts/fetch-prometheus3, scripts/fetch-victoria-metrics). Needs `die`
# and `say` from the caller, and CACHE (a directory for the downloads).
#
# URI: the Debian archive apt on this machine uses.
# fetch <url> <file>: downloads with curl or wget.
# sid_index: sid's binary Packages index, once, into $CACHE/Packages.
# pinned_deb <source dir in pool> <package> <version> <sha256>: the .deb in
#   $CACHE, checked against its SHA-256; if the pinned file has left the
#   pool, the version sid's Packages index names, checked against the
#   index's SHA-256, and that is said loudly. Prints the file's path.

# The first URI of a source that serves the main suite (not -security, not
# -updates), in deb822 or one-line form.
archive_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      /^[[:space:]]*$/ { if (uri != "" && main) { print uri; exit } uri=""; main=0; next }
      /^URIs:/ { uri=$2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-(security|updates|backports)$/) main=1 }
      END { if (uri != "" && main) print uri }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" && $3 !~ /-(security|updates|backports)$/ {
      for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f"
  done
}
URI=$(archive_uri | grep -v -- '-security' | head -n1)
[ -n "$URI" ] || die "no Debian archive found in apt's sources (/etc/apt/sources.list*)"
URI=${URI%/}

fetch() { # url file
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null; then
    wget -q -O "$2" "$1"
  else
    die "neither curl nor wget is installed"
  fi
}

mkdir -p "$CACHE"
INDEX="$CACHE/Packages"
sid_index() {
  if [ ! -s "$INDEX" ]; then
    fetch "$URI/dists/sid/main/binary-amd64/Packages.xz" "$INDEX.xz" ||
      die "cannot fetch $URI/dists/sid/main/binary-amd64/Packages.xz"
    xz -dc "$INDEX.xz" >"$INDEX" || die "cannot unpack sid's Packages index"
  fi
}

pinned_deb() { # pool dir, package, version, sha256
  local dir=$1 pkg=$2 version=$3 want=$4
  local deb="${pkg}_${version}_amd64.deb"
  local file="$CACHE/$deb"
  if ! { [ -f "$file" ] || fetch "$URI/pool/main/$dir/$deb" "$file"; }; then
    rm -f "$file"
    # The pinned file has left the pool: take what sid names now.
    sid_index
    local stanza path newver
    stanza=$(awk -v p="$pkg" 'BEGIN { RS=""; FS="\n" } $1 == "Package: " p { print; exit }' "$INDEX")
    [ -n "$stanza" ] || die "$deb is not in the pool and sid's index has no $pkg"
    path=$(sed -n 's/^Filename: //p' <<<"$stanza")
    want=$(sed -n 's/^SHA256: //p' <<<"$stanza")
    newver=$(sed -n 's/^Version: //p' <<<"$stanza")
    echo "!!! WARNING: $deb has left the Debian pool; using $pkg $newver as sid's Packages index names it ($path) !!!" >&2
    file="$CACHE/$(basename "$path")"
    fetch "$URI/$path" "$file" || die "cannot fetch $URI/$path"
  fi
  echo "$want  $file" | sha256sum -c --quiet - || { rm -f "$file"; die "$file does not have SHA-256 $want"; }
  echo "$file"
}
