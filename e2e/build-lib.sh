# Sourced (not run) by e2e/controlplane/build.sh and e2e/node/build.sh: the Kubernetes version
# both build, the cache root, their log and progress lines, and building one binary of the
# sourcing script's Go module into the cache. The sourcing script sets `build_name` (its log
# prefix), `here` (its directory, holding its go.mod) and, before `build_one`, `dest`.

K8S_VERSION="v1.36.3"
cache_root="${LEASECRON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasecron}"

log() { printf '[%s %s] %s\n' "$build_name" "$(date +%H:%M:%S)" "$*" >&2; }

# Prints one progress line per 50 packages compiled instead of the full `go build -v` list.
progress() {
  awk -v prefix="$build_name" -v name="$1" '{ n++; if (n % 50 == 0) { printf "[%s] %s: %d packages compiled\n", prefix, name, n; fflush() } }' >&2
}

# The -ldflags that stamp $K8S_VERSION into a Kubernetes binary (what `version` reports).
k8s_ldflags() {
  local minor="${K8S_VERSION#v1.}" flags="-s -w" pkg
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$flags"
}

# build_one NAME PACKAGE: `go build` PACKAGE of the module in $here into $dest/NAME, moved into
# place atomically; nothing when $dest/NAME is there.
build_one() {
  local name="$1" pkg="$2" start=$SECONDS ldflags
  [[ -x "$dest/$name" ]] && return 0
  ldflags="$(k8s_ldflags)"
  log "building $name ($pkg)"
  (cd "$here" && go build -v -trimpath -ldflags "$ldflags" -o "$dest/.$name.tmp" "$pkg") 2>&1 | progress "$name"
  mv -f "$dest/.$name.tmp" "$dest/$name"
  log "built $name in $((SECONDS - start)) s"
}
