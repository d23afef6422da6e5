// Anchor source of the libqattn.so target: its code comes whole from qattn_runtime.
