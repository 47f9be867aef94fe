package render

// SplitImage exposes splitImage to the fuzz targets of package render_test,
// which check it against the webhook's image grammar (the webhook imports
// this package, so only an external test package can import it).
var SplitImage = splitImage
