// Package ferrytype holds the types and sentinel errors shared by ferry's
// core, its stores and its brokers. It exists to break import cycles: it
// imports nothing from the rest of the module.
package ferrytype
