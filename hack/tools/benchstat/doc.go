// Package tools pins benchstat in a module of its own, so its dependencies
// never change the versions celsched is built and tested with. The Makefile
// builds it into bin/.
package tools
