// Package readmetest compiles the Go snippets of the repository's README,
// so that what a new user copies builds as written. A snippet takes part
// when the line before its fence is a marker:
//
//	<!-- readmetest: SIGNATURE; imports: PATH ... -->
//
// SIGNATURE is "main" for a whole program (declarations and func main), or
// a function type such as "func(ctx context.Context, sys *actors.System)
// error": the snippet's type and func declarations go to the file's top
// level and its statements become the body of a function of that type.
// The imports are the file's. The test writes each snippet as a package
// inside this module (in a folder go's patterns skip) and builds it.
package readmetest
