"""Choose a parent GPU/VF for a vGPU type: pack | spread | --numa; every rejection carries a reason. Pure."""
