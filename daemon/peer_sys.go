package daemon

import (
	"encoding/binary"
	"unsafe"
)

var nativeEndian = binary.NativeEndian

func uintptrOf(b []byte) uintptr     { return uintptr(unsafe.Pointer(&b[0])) }
func uintptrOfLen(l *uint32) uintptr { return uintptr(unsafe.Pointer(l)) }
