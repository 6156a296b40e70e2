#!/usr/bin/env bash
# Makes a throwaway certificate authority and the certificates a TLS demo or
# benchmark needs, with openssl, into DIR (never into the repository):
#
#   ca.pem                      the CA (channels, the relay and the core trust it)
#   server.pem, server-key.pem  for 127.0.0.1 and localhost: the relay's
#                               listener and the fixture core
#   relay.pem, relay-key.pem    the relay's client certificate for the core
#   mob.pem, mob-key.pem        a channel gateway allowed to send as MOB
#                               (URI SAN urn:dedup:channel:MOB)
#   ibk.pem, ibk-key.pem        one allowed to send as IBK only
#   kim.pem, lee.pem (+ -key.pem, .p12)  operators of the console (URI SANs
#                               urn:dedup:operator:NAME, urn:dedup:role:operator);
#                               the .p12 bundles (password "demo") import into a browser
#   vic.pem (+ -key.pem, .p12)  a viewer of the console (urn:dedup:role:viewer)
#
# The same commands, with a bank's own CA, issue production certificates
# (docs/security.md).
#
#   scripts/certs.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
days=2

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=dedup demo CA" -keyout ca-key.pem -out ca.pem 2>/dev/null

# issue NAME CN EXTENSIONS
issue() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
    -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server relay.demo "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
issue relay relay-01 "extendedKeyUsage=clientAuth"
issue mob mob-gw-01 "subjectAltName=URI:urn:dedup:channel:MOB
extendedKeyUsage=clientAuth"
issue ibk ibk-gw-01 "subjectAltName=URI:urn:dedup:channel:IBK
extendedKeyUsage=clientAuth"
for who in kim lee; do
  issue "$who" "$who" "subjectAltName=URI:urn:dedup:operator:$who,URI:urn:dedup:role:operator
extendedKeyUsage=clientAuth"
done
issue vic vic "subjectAltName=URI:urn:dedup:operator:vic,URI:urn:dedup:role:viewer
extendedKeyUsage=clientAuth"
for who in kim lee vic; do
  openssl pkcs12 -export -in "$who.pem" -inkey "$who-key.pem" -certfile ca.pem -name "dedup operator $who" \
    -passout pass:demo -out "$who.p12" 2>/dev/null
done
rm -f ca.srl
echo "$dir"
