// Package tools exists so this module has a package; the binary comes from
// the tool directive in go.mod.
package tools
