// Anchor source of the libqattn.so target: its code comes whole from the component archives
// (cmake/libqattn.cmake).
