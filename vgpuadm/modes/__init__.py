"""One module per GPU sharing mode (mdev, vendor-VFIO VF, passthrough, SR-IOV), each validate/plan/hostdev."""
