"""Everything that moves or measures, behind one interface (:mod:`drivers.base`)."""
