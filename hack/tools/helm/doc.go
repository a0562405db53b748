// Package tools pins helm in a module of its own, so its dependencies never
// change the versions celsched is built and tested with. The Makefile builds
// it into bin/; the chart test renders charts/celsched with it.
package tools
