#!/usr/bin/env bash
# Generates a test CA, a coordinator certificate for 127.0.0.1/localhost
# (and any extra DNS names given), and worker client certificates, with
# openssl, into DIR. For tests and for trying TLS locally; production
# certificates come from your PKI.
# Usage: scripts/gen_test_certs.sh DIR [worker-name ...] [-- extra-dns-name ...]
set -euo pipefail
dir="$1"; shift
workers=(); dns=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; dns=("$@"); break; fi
  workers+=("$1"); shift
done
[ ${#workers[@]} -gt 0 ] || workers=(worker-1)
mkdir -p "$dir"
cd "$dir"
q() { openssl "$@" 2>/dev/null; }
q req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=mxval test CA" -keyout ca.key -out ca.crt
san="subjectAltName=IP:127.0.0.1,DNS:localhost"
for d in "${dns[@]:-}"; do [ -n "$d" ] && san="$san,DNS:$d"; done
q req -newkey rsa:2048 -nodes -subj "/CN=mxval-coordinator" -keyout server.key -out server.csr
printf '%s\nextendedKeyUsage=serverAuth\n' "$san" > server.ext
q x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile server.ext -out server.crt
for w in "${workers[@]}"; do
  q req -newkey rsa:2048 -nodes -subj "/CN=$w" -keyout "$w.key" -out "$w.csr"
  printf 'extendedKeyUsage=clientAuth\n' > "$w.ext"
  q x509 -req -in "$w.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$w.ext" -out "$w.crt"
done
rm -f ./*.csr ./*.ext ca.srl
chmod 600 ./*.key
echo "certificates in $dir: ca.crt server.crt/key ${workers[*]/%/.crt}"
