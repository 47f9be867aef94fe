// Package tools exists so this module has a package; the binaries come from
// the tool directives in go.mod.
package tools
