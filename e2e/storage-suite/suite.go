//go:build tools

// Package suite only names what the module builds (xtask/src/e2e/storage_suite.rs):
// `go test -c k8s.io/kubernetes/test/e2e`, and `go build` of ginkgo's CLI and of
// k8s.io/kubernetes/test/images/agnhost. The import keeps the requirement in go.mod.
package suite

import _ "k8s.io/kubernetes/test/e2e"
