/* A plain C program that loads a CUDA library of its own (found through its RUNPATH, $ORIGIN). */
#include <stdio.h>

int scale_on_device(int n);

int main(void)
{
    printf("scaled %d\n", scale_on_device(64));
    return 0;
}
