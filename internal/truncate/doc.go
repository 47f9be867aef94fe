// Package truncate shortens strings for messages that have a size limit,
// such as condition messages (the API takes at most 32768 bytes of valid
// UTF-8) or a peer's strings quoted in an error. It is the one place that
// decides how a cut is made and marked.
package truncate
