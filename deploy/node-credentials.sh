#!/usr/bin/env bash
# Make a kubeconfig with real node credentials (user system:node:<node>, group system:nodes)
# through the certificates API, so kubelet-sim runs with exactly a kubelet's rights.
#   deploy/node-credentials.sh n1 > n1.kubeconfig && kubelet-sim --node-name n1 --kubeconfig n1.kubeconfig
# Needs kubectl (with rights to approve CSRs) and openssl.
set -euo pipefail
node=${1:?usage: $0 NODE_NAME > kubeconfig}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$work/key.pem" -out "$work/csr.pem" \
    -subj "/O=system:nodes/CN=system:node:${node}" 2>/dev/null
csr="kubelet-sim-${node}-$(date +%s)"
kubectl apply -f - >/dev/null <<CSR
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: ${csr}
spec:
  request: $(base64 -w0 < "$work/csr.pem")
  signerName: kubernetes.io/kube-apiserver-client-kubelet
  usages: [digital signature, key encipherment, client auth]  # v1.24 wants all three
CSR
kubectl certificate approve "$csr" >/dev/null
for _ in $(seq 1 30); do
    cert=$(kubectl get csr "$csr" -o jsonpath='{.status.certificate}')
    [ -n "$cert" ] && break
    sleep 1
done
[ -n "${cert:-}" ] || { echo "the CSR $csr was not signed" >&2; exit 1; }
# The cluster entry as the current kubeconfig has it: its CA (a file's inlined), or
# insecure-skip-tls-verify, or neither (the system's CAs), and any tls-server-name.
view() { kubectl config view --minify --raw --flatten -o jsonpath="{.clusters[0].cluster.$1}"; }
server=$(view server)
entry="server: \"${server}\""
ca=$(view certificate-authority-data)
if [ -n "$ca" ]; then
    entry+=", certificate-authority-data: \"${ca}\""
elif [ "$(view insecure-skip-tls-verify)" = true ]; then
    entry+=", insecure-skip-tls-verify: true"
fi
name=$(view tls-server-name)
[ -n "$name" ] && entry+=", tls-server-name: \"${name}\""
cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: cluster, cluster: {${entry}}}]
users: [{name: "system:node:${node}", user: {client-certificate-data: "${cert}", client-key-data: "$(base64 -w0 < "$work/key.pem")"}}]
contexts: [{name: "${node}", context: {cluster: cluster, user: "system:node:${node}"}}]
current-context: "${node}"
KUBECONFIG
