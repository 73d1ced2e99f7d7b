// CoreDNS with only the plugins the test node's Corefile names (tests/node/configs.py: corefile).
// CoreDNS's own main imports every plugin it ships, and with them the clients of every cloud's DNS and
// every tracer; this one compiles in a fraction of the time and serves the same Corefile the same way.
// tests/peers/build.sh builds it inside the CoreDNS module, so every version is the release's own.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

// plugins are the Corefile directives this build serves; their order of execution stays CoreDNS's own.
var plugins = map[string]bool{"bind": true, "errors": true, "health": true, "hosts": true, "kubernetes": true}

func init() {
	var kept []string
	for _, name := range dnsserver.Directives {
		if plugins[name] {
			kept = append(kept, name)
		}
	}
	dnsserver.Directives = kept
}

func main() {
	coremain.Run()
}
