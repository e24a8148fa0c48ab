// Package samples is the gallery of runnable sluice programs. Each sample is
// a small, complete topology with its own flags; `sluice samples` lists them
// and `sluice run NAME` runs one. See README.md in this folder for what each
// one shows and prints.
package samples
